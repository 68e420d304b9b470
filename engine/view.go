// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"io/fs"
	"os"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/grow"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
)

// parts are the engine's building blocks on one namespace: the attacher of
// file and directory binds, the block nodes and the grower. New builds the
// engine's and NewView a view's with this one constructor.
type parts struct {
	attacher mount.Attacher
	nodes    blockdev.Nodes
	grower   grow.Grower
}

func newParts(ns *isolation.MountNamespace, root kubelet.Root, c Config) parts {
	return parts{
		attacher: mount.Attacher{NS: ns, KubeletRoot: root.Path, UID: c.UID, GID: c.GID, SysRoot: c.SysRoot},
		nodes:    blockdev.Nodes{NS: ns, Root: root, UID: c.UID, GID: c.GID, SysRoot: c.SysRoot},
		grower: grow.Grower{NS: ns, KubeletRoot: root.Path, SysRoot: c.SysRoot, DevRoot: c.DevRoot,
			PrivateDir: c.PrivateDir},
	}
}

// View is the engine's read-only view of the node: the parts New builds,
// made by the same constructor, with only their looks exposed. diag judges
// the node through it, so that it builds no part of its own and judges
// each volume by the engine's rules: the published image's sameness, each
// target's kind, and the directories the agent may use. Every look runs
// in the view's namespace, within its deadline, and changes nothing; dir
// is a launcher's hotplug-disks relative to the kubelet root.
type View struct{ p parts }

// NewView is the view through ns, the host's mount namespace, beneath
// root, the kubelet root resolved there, of the node c locates (its SysRoot
// and DevRoot; what c lets the engine change does not matter to a view).
func NewView(ns *isolation.MountNamespace, root kubelet.Root, c Config) *View {
	return &View{p: newParts(ns, root, c)}
}

// Image checks the disk.img the kubelet published in sourceDir as Attach
// checks it, and finds it in t: Image.Shows is the attach's judgement of
// whether a bind is that image.
func (v *View) Image(t *mountinfo.Table, sourceDir string) (mount.Image, error) {
	return v.p.attacher.CheckImage(t, sourceDir)
}

// Files lists the launcher's file binds as the engine lists them, each
// named by its target (kubelet.TargetName).
func (v *View) Files(t *mountinfo.Table, dir string) ([]mount.Observed, error) {
	return observeFiles(&v.p.attacher, t, dir)
}

// Dirs lists the launcher's directory binds as the engine lists them.
func (v *View) Dirs(t *mountinfo.Table, dir string) ([]mount.Observed, error) {
	return observeDirs(&v.p.attacher, t, dir)
}

// Nodes lists the launcher's block nodes as the engine lists them; a
// launcher without hotplug-disks has none.
func (v *View) Nodes(t *mountinfo.Table, dir string) ([]blockdev.Node, error) {
	return listNodes(&v.p.attacher, &v.p.nodes, t, dir)
}

// CheckFile judges file, a file volume's target, as the engine's attach
// does before it changes anything (mount.Attacher.CheckTarget).
func (v *View) CheckFile(t *mountinfo.Table, dir, file string) error {
	return v.p.attacher.CheckTarget(t, dir, file)
}

// CheckDir judges name, a directory volume's target, as the engine's
// attach does (mount.Attacher.CheckDirTarget): an unmounted directory the
// agent cannot have left is refused.
func (v *View) CheckDir(t *mountinfo.Table, dir, name string) error {
	return v.p.attacher.CheckDirTarget(t, dir, name)
}

// Node looks at name, a block volume's node, as the engine's attach does
// (blockdev.Nodes.Look), in hotplug-disks opened by mount's rule.
func (v *View) Node(t *mountinfo.Table, dir, name string) (blockdev.Node, error) {
	return mount.InLauncherDir(&v.p.attacher, t, dir, func(d *os.File) (blockdev.Node, error) {
		return v.p.nodes.Look(d, name)
	})
}

// PublishedDevice is the device the kubelet published for block volume pv
// of pod podUID, checked as the engine's attach checks it.
func (v *View) PublishedDevice(podUID, pv string) (blockdev.Published, error) {
	return v.p.nodes.PublishedDevice(podUID, pv)
}

// Measure is what the engine's growth would find of the file bind file
// (grow.Grower.Measure): sizes, and whether growth is due.
func (v *View) Measure(t *mountinfo.Table, dir, file string) (grow.Result, error) {
	return v.p.grower.Measure(t, dir, file)
}

// observeFiles lists the file binds in dir, named by their targets.
func observeFiles(a *mount.Attacher, t *mountinfo.Table, dir string) ([]mount.Observed, error) {
	return a.Observe(t, dir, kubelet.ReadFileTargets)
}

// observeDirs lists the directory binds in dir; a directory target's name
// is its volume's (kubelet.DirTargetName).
func observeDirs(a *mount.Attacher, t *mountinfo.Table, dir string) ([]mount.Observed, error) {
	return a.ObserveDirs(t, dir, kubelet.ReadDirTargets)
}

// listNodes lists the block nodes in dir, opened through mount's
// launcher-directory rule; a missing dir has none.
func listNodes(a *mount.Attacher, nodes *blockdev.Nodes, t *mountinfo.Table, dir string) ([]blockdev.Node, error) {
	ns, err := mount.InLauncherDir(a, t, dir, nodes.Observe)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return ns, err
}
