package diag

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
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
	table, source, err := LoadTable(ctx, opts.MountSource, opts.HostProc, opts.HostPID)
	if err != nil {
		return nil, cannotRun("read the mount table", err)
	}
	rep := &Report{APIVersion: APIVersion, Node: opts.NodeName, KubeletRoot: opts.KubeletRoot, MountSource: source,
		Volumes: []Volume{}, Orphans: []OrphanEntry{}}
	warn := func(s string) { rep.Warnings = append(rep.Warnings, s) }
	cl, err := collect(ctx, &opts, c, warn)
	if err != nil {
		return nil, err
	}
	ns, err := openHostNamespace(opts.HostProc, opts.HostPID)
	if err != nil {
		return nil, cannotRun("enter the host mount namespace", err)
	}
	defer ns.Close()
	in := newInspector(&opts, table, ns)
	rep.Propagation = in.checkPropagation()
	scope := map[string]bool{}
	for _, vmi := range cl.selected {
		rep.Volumes = append(rep.Volumes, in.inspectVMI(ctx, cl, vmi)...)
		for uid, n := range vmi.Status.ActivePods {
			if n == opts.NodeName {
				scope[string(uid)] = true
			}
		}
	}
	if len(opts.VMIs) == 0 {
		scope = nil
	}
	if rep.Orphans, err = in.findOrphans(cl, scope); err != nil {
		return nil, cannotRun("search orphans", err)
	}
	if rep.Orphans == nil {
		rep.Orphans = []OrphanEntry{}
	}
	rep.countProblems()
	return rep, nil
}

func validate(o *Options) error {
	switch {
	case o.NodeName == "":
		return cannotRunf("options", "node name is empty: set --node-name or $NODE_NAME")
	case o.KubeletRoot == "" || !filepath.IsAbs(o.KubeletRoot):
		return cannotRunf("options", "kubelet root %q is not an absolute path", o.KubeletRoot)
	case o.HostPID <= 0:
		return cannotRunf("options", "host pid %d is not a process id", o.HostPID)
	case o.HostProc == "":
		return cannotRunf("options", "host proc is empty")
	}
	o.KubeletRoot = filepath.Clean(o.KubeletRoot)
	if o.CgroupMode == "" {
		o.CgroupMode = blockdev.ModeAuto
	}
	return nil
}

func newInspector(opts *Options, table *mount.Table, ns *isolation.MountNamespace) *inspector {
	in := &inspector{
		opts: opts, table: table, ns: ns,
		attacher: &mount.Attacher{NS: ns, KubeletRoot: opts.KubeletRoot, SysRoot: opts.sysRoot()},
		nodes:    &blockdev.Nodes{NS: ns, KubeletRoot: opts.KubeletRoot},
		grower:   &mount.Grower{NS: ns, KubeletRoot: opts.KubeletRoot, SysRoot: opts.sysRoot(), DevRoot: opts.devRoot()},
	}
	in.rules, in.rulesErr = blockdev.NewDeviceRules(opts.CgroupMode, opts.CgroupRoot)
	if in.rulesErr == nil && in.rules == nil {
		in.rulesErr = errors.New("no device cgroup implementation")
	}
	return in
}

func (in *inspector) checkPropagation() PropagationCheck {
	pods := filepath.Join(in.opts.KubeletRoot, "pods")
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
