package mount

import "path"

// HotplugDisksDir is a launcher pod's hotplug-disks emptyDir, relative to
// the kubelet root.
func HotplugDisksDir(launcherUID string) string {
	return path.Join("pods", launcherUID, "volumes", "kubernetes.io~empty-dir", "hotplug-disks")
}

// LauncherDir is a pod directory that has a hotplug-disks emptyDir.
type LauncherDir struct {
	UID string
	// Empty says the directory holds nothing: no target file, no node.
	Empty bool
}
