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

// maxSightProcs bounds the processes of a launcher pod whose mount
// namespaces check asks about: a launcher runs a handful of containers,
// and anything a tenant forks past that adds nothing to the question.
const maxSightProcs = 256

func (v LauncherView) check(kubeletRoot, hotplugDir, launcher, target string) (Look, error) {
	if v.Dir == "" || v.Pods == nil {
		return Look{}, nil
	}
	cgs, err := v.Pods.Find(v.CgroupRoot, launcher)
	if err != nil {
		return Look{}, nil // no pod cgroup: no process to ask
	}
	// Read at Held's bound: a settled Pods then reads the pod's processes
	// once for both questions.
	pids, _, err := v.Pods.Procs(cgs, maxPodProcs)
	if err != nil || len(pids) == 0 {
		return Look{}, nil
	}
	pids = pids[:min(len(pids), maxSightProcs)]
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
	return Look{Sight: sight, MountID: id, Binds: binds}, err
}
