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

// Check tells whether the launcher with pod UID launcher sees, under
// target in its hotplug-disks, the file the host has there (a filesystem
// volume's bind of disk.img). hotplugDir is that directory's path beneath
// kubeletRoot, the kubelet root as the host mount namespace spells it;
// Check must run in that namespace. It also returns the target's mount id, which names the bind for as
// long as it stays mounted. NotSeen comes with a *NotSeenError; NoView
// (no process of the pod mounts hotplug-disks at Dir) with no error.
func (v LauncherView) Check(kubeletRoot, hotplugDir, launcher, target string) (Sight, uint64, error) {
	return v.check(kubeletRoot, hotplugDir, launcher, target)
}
