package blockdev

import (
	"errors"

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
	// SysRoot is sysfs, for the disks' sequence numbers; "" means /sys.
	SysRoot string
}

// ErrUnconfirmed means a node's major:minor cannot be shown to still name
// the disk it was made for: the number may have been given to another disk
// since. Nothing is granted for it.
var ErrUnconfirmed = errors.New("the node's device cannot be confirmed to be the volume's")

// Recheck confirms that the block node targetDir/name still names the disk
// it was made for, as Ensure recorded it (the disk's sequence number, kept
// on the node itself, so it survives an agent restart without a record
// file), and returns its device. A node without a record, or whose number
// now belongs to another disk, wraps ErrUnconfirmed.
func (n *Nodes) Recheck(targetDir, name string) (Device, error) { return n.recheck(targetDir, name) }
