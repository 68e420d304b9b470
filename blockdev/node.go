package blockdev

import (
	"github.com/hpmount/hpmount/isolation"
)

// Published is the device the kubelet published for a pod's block volume.
type Published struct {
	Device Device
	// Perm is the permission of the published node, copied onto ours.
	Perm uint32
}

// Node is a block device node found in a hotplug-disks directory.
type Node struct {
	Name   string
	Device Device
}

// Nodes manages block device nodes in launchers' hotplug-disks directories.
// Every syscall runs in NS, beneath KubeletRoot, on file descriptors.
type Nodes struct {
	NS          *isolation.MountNamespace
	KubeletRoot string
	UID, GID    int
}
