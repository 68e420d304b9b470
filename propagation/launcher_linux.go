// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// openTarget opens hotplugDir beneath kubeletRoot and target in it, as
// O_PATH descriptors, refusing symlinks on the way.
func openTarget(kubeletRoot, hotplugDir, target string) (dir, t *os.File, err error) {
	root, err := isolation.OpenRoot(kubeletRoot)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	dir, err = isolation.OpenBeneath(root, hotplugDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return nil, nil, err
	}
	t, err = isolation.OpenBeneath(dir, target, isolation.How{Flags: unix.O_PATH})
	if err != nil {
		dir.Close()
		return nil, nil, err
	}
	return dir, t, nil
}

func targetIdent(kubeletRoot, hotplugDir, target string) (Ident, error) {
	dir, t, err := openTarget(kubeletRoot, hotplugDir, target)
	if err != nil {
		return Ident{}, err
	}
	defer dir.Close()
	defer t.Close()
	return identOf(t)
}

func (v LauncherView) check(kubeletRoot, hotplugDir, launcher, target string) (Look, error) {
	if v.Dir == "" || v.Pods == nil {
		return Look{}, nil
	}
	cgs, err := v.Pods.Find(v.CgroupRoot, launcher)
	if err != nil {
		return Look{}, nil // no pod cgroup: no process to ask
	}
	// Read at Held's bound: a settled Pods then reads the pod's processes
	// once for both questions. Every one is asked (Reached asks one per
	// mount namespace): a cut at 256 left a launcher whose container's
	// processes came after the others' unasked, and NoView.
	pids, more, err := v.Pods.Procs(cgs, maxPodProcs)
	if err != nil || len(pids) == 0 {
		return Look{}, nil
	}
	dir, t, err := openTarget(kubeletRoot, hotplugDir, target)
	if err != nil {
		return Look{}, err
	}
	defer dir.Close()
	defer t.Close()
	id, err := isolation.MountID(t)
	if err != nil {
		return Look{}, err
	}
	want, err := identOf(t)
	if err != nil {
		return Look{MountID: id}, err
	}
	l := Launcher{Proc: v.Proc, Pids: pids, Dir: v.Dir}
	if l.DirIdent, err = identOf(dir); err != nil {
		return Look{MountID: id}, err
	}
	sight, binds, err := Reached(l, target, want)
	if more && sight != Seen {
		// A list cut short could leave out the process that sees it:
		// unknown, asked again, never NotSeen.
		return Look{MountID: id}, nil
	}
	return Look{Sight: sight, MountID: id, Binds: binds}, err
}
