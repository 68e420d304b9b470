// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"os"

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
	// Covered: something is mounted on the node's name (a bind of a host
	// file or device node: hpmount never mounts on a block node). Device
	// is then zero, since what is below the mount cannot be reached
	// without removing it (mount.Uncover).
	Covered bool
}

// Nodes manages block device nodes in launchers' hotplug-disks directories.
//
// PublishedDevice runs in NS, beneath Root. Ensure, Recheck, Remove and
// Observe work on a hotplug-disks directory the caller opened and checked
// (mount.InLauncherDir: the launcher-directory rule has one owner, mount,
// and the engine already holds the batch's mount table it is judged
// against), through its descriptor only, on the caller's thread: the
// engine calls them inside that call in the host namespace. Every name is
// looked up with symlinks refused, and a name with a mount on it is
// refused (isolation.ErrUnsafePath) before anything is written, chowned
// or unlinked through it, so a host file or device node bound there is
// never touched.
type Nodes struct {
	NS *isolation.MountNamespace
	// Root is the kubelet root as resolved in NS; its configured spelling
	// is what the kubelet's volumeDevices links name.
	Root     kubelet.Root
	UID, GID int
	// SysRoot is sysfs, for the disks' sequence numbers; "" means /sys.
	SysRoot string

	// beforeMknod, set by tests, runs right before Ensure's mknod: the
	// seam to let another mounter take the name there.
	beforeMknod func(name string)
}

// ErrUnconfirmed means a node's major:minor cannot be shown to still name
// the disk it was made for: the number may have been given to another disk
// since. Nothing is granted for it.
var ErrUnconfirmed = errors.New("the node's device cannot be confirmed to be the volume's")

// Recheck confirms that the block node name in dir still names the disk
// it was made for, as Ensure recorded it (the disk's sequence number, kept
// on the node itself, so it survives an agent restart without a record
// file), and returns its device. A node without a record, or whose number
// now belongs to another disk, wraps ErrUnconfirmed; a missing node wraps
// fs.ErrNotExist.
func (n *Nodes) Recheck(dir *os.File, name string) (Device, error) { return n.recheck(dir, name) }

// Look says what is at name in dir, a launcher's hotplug-disks the caller
// opened, and changes nothing: a node and its device; a Node marked
// Covered, with no device, when something is mounted on the name (as
// Observe lists it); an error wrapping isolation.ErrUnsafePath when it is
// not a block device, as Ensure refuses it; fs.ErrNotExist when nothing is
// there. diag judges a block volume's target by it.
func (n *Nodes) Look(dir *os.File, name string) (Node, error) { return n.look(dir, name) }
