// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/podcgroup"
	"github.com/hpmount/hpmount/propagation"
)

// Run diagnoses the hotplug volumes of the VMIs on opts.NodeName. It reads
// the API (c), the host's mount table and the kubelet tree, and changes
// nothing. Problems found are in the Report; an error (a *CannotRunError)
// means no diagnosis could be made.
func Run(ctx context.Context, opts Options, c Clients) (*Report, error) {
	if err := validate(&opts); err != nil {
		return nil, err
	}
	// The table (findmnt's run, mostly CPU) is read while the API is
	// listed (mostly waiting): a node's table takes as long as the lists.
	loaded := make(chan tableLoad, 1)
	go func() {
		var l tableLoad
		l.table, l.source, l.err = loadTable(ctx, &opts)
		loaded <- l
	}()
	ns, err := isolation.OpenMountNamespace(opts.Host.MountNamespace())
	if err != nil {
		return nil, cannotRun("enter the host mount namespace", err)
	}
	defer ns.Close()
	// Every look through ns (the kubelet root, sources, targets, the
	// launcher's view, sizes) is abandoned past the deadline, on a thread
	// that is written off while a fresh one serves the next volume.
	ns.SetTimeout(opts.callTimeout())
	root, err := kubelet.ResolveRoot(ns, opts.KubeletRoot)
	if err != nil {
		return nil, cannotRun("find the kubelet root", err)
	}
	var warnings []string
	cl, err := collect(ctx, &opts, c, func(s string) { warnings = append(warnings, s) })
	if err != nil {
		return nil, err
	}
	l := <-loaded
	if l.err != nil {
		return nil, cannotRun("read the mount table", l.err)
	}
	table := l.table
	rep := &Report{APIVersion: APIVersion, Node: opts.NodeName, KubeletRoot: root.Path, MountSource: l.source,
		Volumes: []Volume{}, Orphans: []OrphanEntry{}}
	warn := func(s string) { rep.Warnings = append(rep.Warnings, s) }
	if k := table.Skipped(); k.Lines > 0 {
		warn(fmt.Sprintf("%d lines of the mount table could not be parsed and were left out; the first: %v", k.Lines, k.First))
	}
	for _, w := range warnings {
		warn(w)
	}
	rep.Storage = cl.storage.Sources()
	in := newInspector(&opts, root, table, ns)
	rep.Propagation = in.checkPropagation()
	rep.Volumes = append(rep.Volumes, inspectAll(ctx, in, cl)...)
	scope := map[string]bool{}
	for _, vmi := range cl.selected {
		for _, uid := range kubevirt.ActivePodsOn(vmi, opts.NodeName) {
			scope[string(uid)] = true
		}
	}
	if len(opts.VMIs) == 0 {
		scope = nil
	}
	if rep.Orphans, err = in.findOrphans(cl, scope, warn); err != nil {
		return nil, cannotRun("search orphans", err)
	}
	if rep.Orphans == nil {
		rep.Orphans = []OrphanEntry{}
	}
	rep.countProblems()
	return rep, nil
}

// inspectAll inspects the selected VMIs in their order, on in and on a
// second inspector with a thread of its own in the host namespace: each
// look is a hand-off to such a thread and back, and one thread left a
// node's thousand volumes waiting in line on a two-core node. Each VMI is
// inspected wholly by one of them. Without a second thread, in does all.
func inspectAll(ctx context.Context, in *inspector, cl *apiView) []Volume {
	all := []*inspector{in}
	if len(cl.selected) > 1 {
		if ns, err := isolation.OpenMountNamespace(in.opts.Host.MountNamespace()); err == nil {
			defer ns.Close()
			ns.SetTimeout(in.timeout)
			second := newInspector(in.opts, in.root, in.table, ns)
			second.propErr = in.propErr
			all = append(all, second)
		}
	}
	per := make([][]Volume, len(cl.selected))
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, x := range all {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(per); i = int(next.Add(1) - 1) {
				per[i] = x.inspectVMI(ctx, cl, cl.selected[i])
			}
		})
	}
	wg.Wait()
	// The orphan search, on in, reads the launchers' listings the
	// volumes were judged by, whichever inspector made them.
	for _, x := range all[1:] {
		if in.observedDirs == nil {
			in.observedDirs = map[string]observation{}
		}
		maps.Copy(in.observedDirs, x.observedDirs)
	}
	var out []Volume
	for _, vs := range per {
		out = append(out, vs...)
	}
	return out
}

func validate(o *Options) error {
	switch {
	case o.NodeName == "":
		return cannotRunf("options", "node name is empty: set --node-name or $NODE_NAME")
	case o.KubeletRoot == "" || !filepath.IsAbs(o.KubeletRoot):
		return cannotRunf("options", "kubelet root %q is not an absolute path", o.KubeletRoot)
	}
	if err := o.Host.Validate(); err != nil {
		return cannotRun("options", err)
	}
	o.KubeletRoot = filepath.Clean(o.KubeletRoot)
	if o.CallTimeout < 0 {
		return cannotRunf("options", "call timeout %s is negative", o.CallTimeout)
	}
	if o.CgroupMode == "" {
		o.CgroupMode = blockdev.CgroupAuto
	}
	return nil
}

func newInspector(opts *Options, root kubelet.Root, table *mountinfo.Table, ns *isolation.MountNamespace) *inspector {
	in := &inspector{
		opts: opts, root: root, table: table, ns: ns, timeout: opts.callTimeout(),
		engine: engine.NewView(ns, root, engine.Config{Host: opts.Host, KubeletRoot: opts.KubeletRoot,
			CgroupRoot: opts.CgroupRoot, CgroupMode: opts.CgroupMode, SysRoot: opts.sysRoot(), DevRoot: opts.devRoot()}),
	}
	in.rules, in.rulesErr = bounded(in.timeout, "find the device cgroups", func() (blockdev.DeviceRules, error) {
		return blockdev.NewDeviceRules(opts.CgroupMode, opts.CgroupRoot)
	})
	if in.rulesErr == nil && in.rules == nil {
		in.rulesErr = errors.New("no device cgroup implementation")
	}
	if in.rulesErr == nil {
		// Each launcher pod's cgroups are found once per run: the launcher
		// is asked about twice per volume, and the report is of the node
		// as diag found it.
		in.view = propagation.LauncherView{Proc: opts.Host.Proc, Dir: kubevirt.HotplugDisksMountPath,
			CgroupRoot: in.rules.Root(), Pods: new(podcgroup.Finder).Settle()}
	}
	return in
}

// tableLoad is loadTable's result.
type tableLoad struct {
	table  *mountinfo.Table
	source string
	err    error
}

// loadTable is LoadTable within the call deadline: findmnt is killed at
// it, and a read that does not come back is abandoned.
func loadTable(ctx context.Context, opts *Options) (*mountinfo.Table, string, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.callTimeout())
	defer cancel()
	type loaded struct {
		table  *mountinfo.Table
		source string
	}
	l, err := bounded(opts.callTimeout(), "read the mount table", func() (loaded, error) {
		t, source, err := LoadTable(ctx, opts.MountSource, opts.Host)
		if err != nil && ctx.Err() != nil {
			// findmnt killed at the deadline: say so, not "signal: killed".
			err = fmt.Errorf("%w after %s: %w", errStuck, opts.callTimeout(), err)
		}
		return loaded{t, source}, err
	})
	return l.table, l.source, err
}

func (in *inspector) checkPropagation() PropagationCheck {
	pods := in.root.Abs(kubelet.PodsDir)
	pc := PropagationCheck{Path: pods}
	if m := in.table.Containing(pods); m != nil {
		pc.MountPoint, pc.Mode = m.MountPoint, m.Propagation()
	}
	in.propErr = propagation.CheckShared(in.table, pods)
	pc.Shared = in.propErr == nil
	if in.propErr != nil {
		pc.Error = in.propErr.Error()
	}
	return pc
}
