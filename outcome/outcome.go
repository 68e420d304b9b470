// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package outcome

// Op is one kind of planned node operation.
type Op string

const (
	// Attach makes a volume visible in its launcher: a bind mount of
	// disk.img, or a block node with its device-cgroup rule.
	Attach Op = "attach"
	// Verify re-checks a healthy block node and its rule on resync; it
	// changes something only when they are wrong.
	Verify Op = "verify"
	// Detach removes a volume from its launcher.
	Detach Op = "detach"
	// Grow checks a volume's sizes and grows its filesystem (and, when
	// enabled, its disk.img) online.
	Grow Op = "grow"
)

// Ops lists every Op, in plan order.
var Ops = []Op{Detach, Attach, Verify, Grow}

// Result is how an operation ended.
type Result string

const (
	// Unchanged: everything already was as asked; no syscall changed
	// anything.
	Unchanged Result = "unchanged"
	// Mounted: a file bind was made on a target that had none.
	Mounted Result = "mounted"
	// Created: a block node was made, or its missing rule added.
	Created Result = "created"
	// Replaced: a wrong, dead or stacked mount, or a node of another
	// device, was removed and the right one made.
	Replaced Result = "replaced"
	// Removed: a target's mounts were unmounted and the target unlinked,
	// or a block node and its rule were removed.
	Removed Result = "removed"
	// Grown: the filesystem or disk.img got larger.
	Grown Result = "grown"
	// NotPublished: the kubelet does not publish the volume for the
	// attachment pod (yet, or any more).
	NotPublished Result = "not-published"
	// Refused: tenant content or API objects are unsafe; nothing was
	// touched.
	Refused Result = "refused"
	// Abandoned: the operation did not finish within its deadline (a
	// syscall stuck in the kernel) and was left behind; its effect is
	// unknown until the node is looked at again.
	Abandoned Result = "abandoned"
	// LeftToHandler: a detach left undone because virt-handler's record
	// names the target, which virt-handler removes itself once the volume
	// leaves the VMI's volumeStatus; nothing was touched.
	LeftToHandler Result = "left-to-virt-handler"
	// Error: the operation failed; it is retried.
	Error Result = "error"
)

// Results lists every Result.
var Results = []Result{Unchanged, Mounted, Created, Replaced, Removed, Grown, NotPublished, Refused, Abandoned, LeftToHandler, Error}

// Changed reports whether r made a change on the node.
func (r Result) Changed() bool {
	switch r {
	case Mounted, Created, Replaced, Removed, Grown:
		return true
	}
	return false
}
