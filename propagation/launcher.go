// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import "github.com/hpmount/hpmount/podcgroup"

// LauncherView locates launchers' processes and where their containers
// mount hotplug-disks, for asking a launcher what it sees.
type LauncherView struct {
	// Proc is the host's procfs, "/proc".
	Proc string
	// Dir is where the launcher's compute container mounts hotplug-disks
	// (kubevirt.HotplugDisksMountPath). Empty: nothing is asked.
	Dir string
	// CgroupRoot is the cgroup hierarchy the pods' cgroups are found in.
	CgroupRoot string
	// Pods remembers where each pod's cgroup is; shared between checks.
	Pods *podcgroup.Finder
}

// Look is what Check found of one target.
type Look struct {
	Sight Sight
	// MountID is the host's bind on the target (the id mountinfo shows),
	// which names it for as long as it stays mounted; 0 when not found.
	MountID uint64
	// Binds are the launcher's own binds on the target, one per mount
	// namespace that sees the host's file (Reached): what QEMU opens by
	// the target's name until the bind is replaced.
	Binds []Bound
}

// Check tells whether the launcher with pod UID launcher sees, under
// target in its hotplug-disks, the file the host has there (a filesystem
// volume's bind of disk.img). hotplugDir is that directory's path beneath
// kubeletRoot, the kubelet root as the host mount namespace spells it;
// Check must run in that namespace. NotSeen comes with a *NotSeenError;
// NoView (no process of the pod mounts hotplug-disks at Dir) with no error.
func (v LauncherView) Check(kubeletRoot, hotplugDir, launcher, target string) (Look, error) {
	return v.check(kubeletRoot, hotplugDir, launcher, target)
}
