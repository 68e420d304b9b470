package blockdev

import (
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
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
// Every syscall runs in NS, beneath Root, on file descriptors.
type Nodes struct {
	NS *isolation.MountNamespace
	// Root is the kubelet root as resolved in NS; its configured spelling
	// is what the kubelet's volumeDevices links name.
	Root     kubelet.Root
	UID, GID int
}
