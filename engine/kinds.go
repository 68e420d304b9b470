// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// The engine's half of the kinds table. hotplug.Kinds says what each kind
// is (its target's name, whether it is bound, grows, has a device rule);
// kinds says how the engine lists, attaches, detaches and grows its
// volumes. The engine asks the table, never the mode.

// kind is how the engine handles the volumes of one hotplug.Kind. attach,
// detach and grow run on the runner the engine gave the call (hands), list
// on the launcher's looker; each returns errors as the engine's boundary
// translates them (refusal, stuck).
type kind interface {
	// list appends the kind's entries in a launcher's hotplug-disks dir,
	// held open through a (mount.Attacher.WithLauncherDir), to ls,
	// unchecked.
	list(e *Engine, a *mount.Attacher, t *mountinfo.Table, dir string, ls *listing) error
	// attach makes v visible in its launcher: outcome.Unchanged, Mounted,
	// Created or Replaced.
	attach(e *Engine, h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error)
	// detach removes the launcher's entry of the volume name, and what the
	// engine remembers of it: outcome.Unchanged or Removed.
	detach(e *Engine, h hands, t *mountinfo.Table, launcher types.UID, name string) (outcome.Result, error)
	// grow checks v for a grown device and does what the kind's Growth
	// says; a kind with nothing to size wraps errNoGrowth.
	grow(e *Engine, h hands, t *mountinfo.Table, v hotplug.DesiredVolume) (hotplug.GrowResult, error)
}

// The kinds, each with hotplug's facts of it.
type (
	// fileKind binds a volume's disk.img onto <volume>.img (mount).
	fileKind struct{ hotplug.Kind }
	// dirKind binds a volume's root onto the directory <volume> (mount).
	dirKind struct{ hotplug.Kind }
	// blockKind makes the node <volume> and its device rule (blockdev).
	blockKind struct{ hotplug.Kind }
)

var (
	_ kind = fileKind{}
	_ kind = dirKind{}
	_ kind = blockKind{}
)

// kinds is the table, by mode: one entry for each of hotplug.Kinds
// (TestKindsTable).
var kinds = map[kubevirt.VolumeMode]kind{
	kubevirt.Filesystem: fileKind{facts(kubevirt.Filesystem)},
	kubevirt.Directory:  dirKind{facts(kubevirt.Directory)},
	kubevirt.Block:      blockKind{facts(kubevirt.Block)},
}

// facts is hotplug's entry of mode.
func facts(mode kubevirt.VolumeMode) hotplug.Kind {
	k, _ := hotplug.KindOf(mode)
	return k
}

var (
	errUnknownKind = errors.New("no kind of volume has this mode")
	errNoGrowth    = errors.New("a volume of this kind has nothing to grow")
)

// kindOf is the engine's kind of mode.
func kindOf(mode kubevirt.VolumeMode) (kind, error) {
	if k, ok := kinds[mode]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("volume mode %q: %w", mode, errUnknownKind)
}

// listKinds lists the launcher's entries of every kind, in hotplug's order.
func (e *Engine) listKinds(a *mount.Attacher, t *mountinfo.Table, dir string) (listing, error) {
	ls := listing{t: t}
	for _, f := range hotplug.Kinds() {
		if err := kinds[f.Mode].list(e, a, t, dir, &ls); err != nil {
			return listing{}, err
		}
	}
	return ls, nil
}

func (k fileKind) list(_ *Engine, a *mount.Attacher, t *mountinfo.Table, dir string, ls *listing) error {
	files, err := observeFiles(a, t, dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		f.Name, _ = kubelet.FileTargetVolume(f.Name)
		ls.binds = append(ls.binds, bindOf(f, k.Kind))
	}
	return nil
}

func (k dirKind) list(_ *Engine, a *mount.Attacher, t *mountinfo.Table, dir string, ls *listing) error {
	dirs, err := observeDirs(a, t, dir)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		ls.binds = append(ls.binds, bindOf(d, k.Kind))
	}
	return nil
}

func (k blockKind) list(e *Engine, a *mount.Attacher, t *mountinfo.Table, dir string, ls *listing) error {
	nodes, err := listNodes(a, e.nodes, t, dir)
	ls.nodes = nodes
	return err
}

func (k fileKind) attach(e *Engine, h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error) {
	t, src, err := e.bindSource(h, s, v)
	if err != nil {
		return outcome.Unchanged, err
	}
	return e.attachFile(h, t, v, src, k.Target)
}

func (k dirKind) attach(e *Engine, h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error) {
	t, src, err := e.bindSource(h, s, v)
	if err != nil {
		return outcome.Unchanged, err
	}
	return e.attachDir(h, t, v, src, k.Target)
}

func (k blockKind) attach(e *Engine, h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error) {
	t, err := e.tableFor(h.ns, s, v.LauncherUID)
	if err != nil {
		return outcome.Unchanged, err
	}
	r, err := e.attachBlock(h, t, v)
	return r, refusal(err)
}

func (k fileKind) detach(e *Engine, h hands, t *mountinfo.Table, launcher types.UID, name string) (outcome.Result, error) {
	e.forgetBind(launcher, name)
	r, err := h.attacher.Detach(t, hotplugDisks(launcher), k.Target(name))
	return r, stuck(err)
}

func (k dirKind) detach(e *Engine, h hands, t *mountinfo.Table, launcher types.UID, name string) (outcome.Result, error) {
	e.forgetBind(launcher, name)
	r, err := h.attacher.DetachDir(t, hotplugDisks(launcher), k.Target(name))
	return r, stuck(err)
}

func (k blockKind) detach(e *Engine, h hands, t *mountinfo.Table, launcher types.UID, name string) (outcome.Result, error) {
	r, err := e.detachBlock(h, t, launcher, name)
	return r, stuck(err)
}

func (k fileKind) grow(e *Engine, h hands, t *mountinfo.Table, v hotplug.DesiredVolume) (hotplug.GrowResult, error) {
	return e.growFile(h, t, v, k.Target)
}

func (k dirKind) grow(_ *Engine, _ hands, _ *mountinfo.Table, v hotplug.DesiredVolume) (hotplug.GrowResult, error) {
	return hotplug.GrowResult{}, fmt.Errorf("grow directory volume %q: %w", v.Name, errNoGrowth)
}

func (k blockKind) grow(e *Engine, _ hands, t *mountinfo.Table, v hotplug.DesiredVolume) (hotplug.GrowResult, error) {
	return e.blockSize(t, v.LauncherUID, v.Name)
}
