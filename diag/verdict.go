// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/grow"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/propagation"
)

// findings are the facts about one volume that decide its verdict. The
// first that applies, in the order of the fields, wins.
type findings struct {
	refused     *kubevirt.Refusal // why the agent refuses the volume
	err         error             // the volume could not be inspected, or a look at it got stuck
	propagation error             // propagation.CheckShared failed for the pods dir
	notMounted  string            // why nothing is at the target
	stale       string            // why the mount or node's source is gone or another
	stacked     int               // mounts on the target, when more than one
	notSeen     string            // the launcher does not see the bind, and why
	staleOpen   string            // QEMU holds what is no longer the volume's
	notOpen     string            // QEMU runs but has not opened the volume
	wrongDevice string            // node vs published device
	covered     bool              // wrongDevice: a mount sits on the node's name
	notAllowed  string            // the device cgroup rule is missing
	needsExpand bool
	notGrown    string // the claim asks for more than its device has
	target      string
	block       bool
}

// judge sets v.Verdict, v.Hint and v.Detail from f.
func judge(v *Volume, f *findings) {
	verdict, detail := OK, ""
	switch {
	case f.refused != nil:
		verdict, detail = Refused, f.refused.Message
		v.RefusalReason = f.refused.Reason
	case f.err != nil && stuck(f.err):
		verdict, detail = Stuck, f.err.Error()
	case f.err != nil && mount.DeadSource(f.err):
		verdict, detail = DeadSource, f.err.Error()
	case f.err != nil:
		verdict, detail = Error, f.err.Error()
	case f.propagation != nil:
		verdict, detail = PropagationBroken, f.propagation.Error()
	case f.notMounted != "":
		verdict, detail = NotMounted, f.notMounted
	case f.stale != "":
		verdict, detail = StaleSource, f.stale
	case f.stacked > 1:
		verdict, detail = Stacked, fmt.Sprintf("%d mounts are stacked on %s", f.stacked, f.target)
	case f.notSeen != "":
		verdict, detail = NotPropagated, f.notSeen
	case f.staleOpen != "":
		verdict, detail = StaleOpen, f.staleOpen
	case f.wrongDevice != "":
		verdict, detail = WrongDevice, f.wrongDevice
	case f.notAllowed != "":
		verdict, detail = NotAllowed, f.notAllowed
	case f.needsExpand:
		verdict, detail = NeedsFSExpand, fmt.Sprintf("the device is larger than its filesystem by more than %d MiB", grow.SlackBytes>>20)
	case f.notGrown != "":
		verdict, detail = ExpandPending, f.notGrown
	case f.notOpen != "":
		verdict, detail = NotOpen, f.notOpen
	}
	v.Verdict, v.Hint = verdict, hintFor(verdict, f)
	if v.Detail == "" {
		v.Detail = detail
	} else if detail != "" {
		v.Detail = detail + "; " + v.Detail
	}
}

// hintFor is the one line of advice for a verdict.
func hintFor(verdict Verdict, f *findings) string {
	switch verdict {
	case Refused:
		return "hpmount refuses this volume and never touches it: fix what the detail names (a disk.img that is not a plain file, an unsafe volume name, pods that do not belong to the VMI)"
	case Stuck:
		return "a look at the volume (a stat, an open, a read of what QEMU holds) got no answer within --call-timeout and was abandoned: its storage hangs (a hard-mounted NFS server gone, a hung FUSE daemon, a lost iSCSI path): check `dmesg` for hung tasks and the storage backend; the agent's calls on it are abandoned too (HotplugStuck Events). The other volumes were diagnosed; the abandoned thread ends when the storage answers or diag exits"
	case DeadSource:
		return "the volume's filesystem answers only I/O errors (shut down after an error, or its device or storage server is gone): check the kernel log (dmesg) and the storage backend; no remount can repair it, so unplug the volume (its target detaches) or restart the VM once the storage is back"
	case Error:
		return "the volume could not be inspected: run diag with the agent's privileges (in the agent pod: kubectl exec), and check the detail"
	case PropagationBroken:
		var ns *propagation.NotSharedError
		if errors.As(f.propagation, &ns) {
			return fmt.Sprintf("run `mount --make-rshared %s` on the host, make it persistent (see detail), then recreate launcher pods started before the fix", ns.MountPoint)
		}
		return "the kubelet pods directory must be on a shared mount: see detail"
	case NotMounted:
		return notMountedHint(f.notMounted)
	case StaleSource:
		if f.block {
			return fmt.Sprintf("the node points at a device that is gone: the agent recreates it on its next reconcile; or `rm %s`", f.target)
		}
		return fmt.Sprintf("the mounted disk.img is deleted or from another device: the agent replaces the mount on its next reconcile; or `umount %s`", f.target)
	case Stacked:
		return fmt.Sprintf("unmount the extra mounts: run `umount %s` %d time(s); the agent then leaves exactly one", f.target, f.stacked-1)
	case NotPropagated:
		return "the launcher's view of hotplug-disks does not receive the node's mounts (started before the pods dir was shared, or without mountPropagation: HostToContainer): restart the launcher pod (migrate the VM); mounting again does not help"
	case WrongDevice:
		if f.covered {
			return fmt.Sprintf("the agent unmounts what is mounted there on its next reconcile, without touching what was bound; or `umount %s`", f.target)
		}
		return fmt.Sprintf("the node is not the published device: the agent replaces it on its next reconcile; or `rm %s` and let it recreate the node", f.target)
	case NotAllowed:
		return "the launcher's device cgroup does not allow the device: on cgroup v2 each virt-handler sync whose Mount stops at a failing volume replaces the launcher's device program with its own list (kubevirt#7710), and the agent allows the device again within half a second (a DeviceRuleRestored Event); if it stays, check the agent's --cgroup-root/--cgroup-mode and its logs"
	case ExpandPending:
		return expandPendingHint
	case StaleOpen:
		return "QEMU still holds the file or device the volume had before it was replaced (e.g. a storage re-attach): the guest's I/O goes to a disk that is gone, so the VM pauses on I/O errors or reads stale data; no remount reaches QEMU: unplug and plug the volume again (virtctl removevolume/addvolume) or restart the VM; hpmount never acts on QEMU"
	case NotOpen:
		return "QEMU has not opened the volume: expected until KubeVirt attaches the disk to the domain; if it stays, check the VMI's conditions and virt-handler's logs"
	case NeedsFSExpand:
		return fmt.Sprintf("the filesystem is smaller than its device: look for a FilesystemExpansionFailed Event on the VMI (the agent grows it unless --grow-filesystems=false), or run `xfs_growfs %s` (xfs) / `resize2fs <device>` (ext4)", f.target)
	}
	return ""
}

const (
	whyNoLauncher   = "no running virt-launcher pod of the VMI on this node"
	whyNoAttachment = "status.volumeStatus names no attachment pod yet"
	whyNoAttachPod  = "the attachment pod named in status.volumeStatus is not on this node"
	whyUnpublished  = "the kubelet does not publish the volume for the attachment pod, and nothing is mounted"
	whyNotMounted   = "nothing is mounted on the target"
	whyNoNode       = "there is no block device node at the target"
)

func notMountedHint(why string) string {
	switch why {
	case whyNoLauncher:
		return "the VMI has no running virt-launcher pod here: check the VMI's phase and `kubectl get pods -l kubevirt.io/created-by=<vmi uid>`"
	case whyNoAttachment, whyNoAttachPod:
		return "wait for virt-controller to start the attachment pod (hp-volume-*) on this node; check the VMI's events if it does not"
	case whyUnpublished:
		return "the kubelet has not published the volume: `kubectl describe pod` the attachment pod for attach/mount errors"
	}
	return "the agent has not attached it yet: check that the hpmount agent runs on this node and its logs and the VMI's events"
}

func leftToHandlerHint(target string) string {
	return fmt.Sprintf("no VMI on this node wants it, and virt-handler's record names it: virt-handler removes it at its next sync of the VMI, and the agent leaves it to it; do not remove %s by hand (virt-handler's Unmount would then fail at every sync)", target)
}

func orphanHint(kind, target string) string {
	if kind == "block-node" {
		return fmt.Sprintf("no VMI on this node wants it: the agent removes it when it reconciles the launcher's VMI; if the VMI is gone, `rm %s`", target)
	}
	return fmt.Sprintf("no VMI on this node wants it: the agent unmounts it when it reconciles the launcher's VMI; if the VMI is gone, `umount %s && rm %s`", target, target)
}
