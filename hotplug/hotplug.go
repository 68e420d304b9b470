// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package hotplug

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// Source says where the kubelet published a volume for the attachment pod.
// The engine turns it into a path beneath the kubelet root; the agent never
// builds kubelet paths itself.
type Source struct {
	AttachmentPodUID types.UID
	// PVName is the PersistentVolume bound to the claim: the kubelet names the
	// volume's directories after it.
	PVName string
}

// DesiredVolume is one hotplug volume that the VMI wants in its launcher.
type DesiredVolume struct {
	Name string // the VMI's volume name; the target is <Name>.img or <Name>
	// Mode is Filesystem (a bind of disk.img), Block (a node) or
	// Directory (a bind of the PVC's root: memory-dump, utility volumes).
	Mode        kubevirt.VolumeMode
	LauncherUID types.UID
	// ComputeContainerID is the launcher's compute container as its pod
	// status names it ("containerd://<id>"), "" while it names none. A
	// block volume's device is allowed to that container only, never to
	// the pod's other containers; without it nothing is granted.
	ComputeContainerID string
	Source             Source
	// CapacityBytes is the PVC capacity from the VMI status, 0 if unknown.
	CapacityBytes int64
	// FilesystemOverhead is KubeVirt's reserved fraction (0 <= x < 1).
	FilesystemOverhead float64
}

// ObservedVolume is one entry the engine found in a launcher's hotplug-disks
// directory, with what the kernel says about it.
type ObservedVolume struct {
	Name string
	Mode kubevirt.VolumeMode
	// Filesystem and Directory mode: the top mount on <Name>.img or
	// <Name>, if any. Block mode: something is mounted on the node (never
	// hpmount's doing), so it is not healthy and the next attach removes
	// the mount.
	Mounted    bool
	Stacked    int    // mounts on the target; >1 is a fault the engine repairs
	SourceDev  string // "MAJ:MIN" of the mounted filesystem
	SourceRoot string // root of the bind inside that filesystem, e.g. /disk.img
	SourceGone bool   // the mounted file was deleted or its device vanished
	// NotPropagated: the launcher mounts hotplug-disks but does not see
	// this mount there (its view is not a slave of the host's). Mounting
	// again cannot help, so the entry still counts as healthy; it is
	// reported instead of MountedToPod.
	NotPropagated bool
	// StaleOpen: the launcher's QEMU holds, under the entry's name, a
	// device or file that is no longer the volume's (a storage re-attach
	// published it anew after QEMU opened it; harvester#11208). No mount
	// reaches QEMU's descriptor: only an unplug and plug of the volume, or
	// a restart of the VM, reopens it, so the agent reports it and never
	// acts. StaleWhy says what QEMU holds, for a person.
	StaleOpen bool
	StaleWhy  string
	// Unchecked is why a check of this entry did not finish (it wraps
	// ErrStuck: asking whether the launcher sees it, or what QEMU holds,
	// hung on its storage). NotPropagated and StaleOpen are then unknown,
	// not false. Only this entry is affected: the launcher's other entries
	// are observed as usual.
	Unchecked error
	// Answering: a probe of the entry's storage is still out, within its
	// deadline, and the entry was reported as its remembered checks say.
	// A pass after this long tells whether the storage answered.
	Answering time.Duration
	// Block mode: the device number the node points at.
	DeviceMajor, DeviceMinor uint32
}

// Healthy reports whether an observed entry already is what a volume of
// mode wants: a single live mount on a bound kind's target (Kind.Bound),
// or a node nothing is mounted on.
func (o *ObservedVolume) Healthy(mode kubevirt.VolumeMode) bool {
	if o == nil || o.Mode != mode {
		return false
	}
	if k, _ := KindOf(mode); k.Bound {
		return o.Mounted && o.Stacked <= 1 && !o.SourceGone
	}
	return !o.Mounted
}

// GrowResult reports an online filesystem growth check.
type GrowResult struct {
	DeviceBytes       int64
	FilesystemBefore  int64
	FilesystemAfter   int64
	DiskImageBefore   int64
	DiskImageAfter    int64
	FilesystemType    string
	Grown, ImageGrown bool
	// SlackBytes is by how much a claim may be below the device before it
	// counts as a request to shrink: backends round devices up.
	SlackBytes int64
}

// ErrBusy is wrapped by Grow when another resizer holds the filesystem
// (CSI NodeExpandVolume racing for it: EBUSY, EAGAIN). It is retried soon
// and never reported as a failed expansion.
var ErrBusy = errors.New("the filesystem is busy with another resize")

// ErrNotPropagated is wrapped by an Attach whose mount is in place on the
// host but not seen by the launcher; the result still says what was done.
var ErrNotPropagated = errors.New("the launcher does not see the mount")

// ErrStuck is wrapped by an Engine call that did not finish within its
// deadline and was abandoned; what it did is unknown until the node is
// observed again.
var ErrStuck = errors.New("the node call did not finish within its deadline and was abandoned")

// Snapshot is one read of the host mount table, shared by every call of a
// batch so that a batch costs one mountinfo scan.
type Snapshot interface {
	// Entries is the number of mounts read, for metrics; 0 when the
	// snapshot read no table because each call reads its own launcher's
	// mounts (statmount), so that no scan is reported.
	Entries() int
	// Unparsed is how many lines of the table could not be parsed and
	// were left out, and why the first one could not.
	Unparsed() (int, error)
}

// Engine is the node side: everything that touches the host's mounts,
// device nodes and cgroups. Every method is idempotent. Errors the agent
// tells apart, the engine translates at its boundary:
//   - a volume the attachment pod does not publish wraps
//     kubelet.ErrNotPublished;
//   - tenant content the engine will not touch is a *kubevirt.Refusal
//     (reason kubevirt.RefusedUnsafeContent);
//   - a call abandoned past its deadline wraps ErrStuck.
type Engine interface {
	Snapshot(ctx context.Context) (Snapshot, error)
	// Observe lists what is in the launcher's hotplug-disks directory. A
	// launcher whose directory does not exist yields no entries and no error.
	Observe(ctx context.Context, s Snapshot, launcher types.UID) ([]ObservedVolume, error)
	// Attach makes the volume visible in its launcher; the result is one
	// of outcome.Unchanged, Mounted, Created or Replaced. A filesystem
	// volume mounted on the host that the launcher does not see comes
	// with an error wrapping ErrNotPropagated.
	Attach(ctx context.Context, s Snapshot, v DesiredVolume) (outcome.Result, error)
	// Detach removes an observed entry; outcome.Unchanged or Removed.
	Detach(ctx context.Context, s Snapshot, launcher types.UID, o ObservedVolume) (outcome.Result, error)
	// Grow checks a mounted filesystem-mode volume for a grown device and
	// grows its filesystem (and, if enabled, its disk.img) online. While
	// the attachment pod still publishes the volume, growing the
	// filesystem is CSI NodeExpandVolume's job and Grow only measures; a
	// resize that loses a race to it wraps ErrBusy.
	Grow(ctx context.Context, s Snapshot, v DesiredVolume) (GrowResult, error)
	// Launchers lists the pods whose hotplug-disks directory holds
	// anything, so that what a deleted launcher left is found even after
	// the agent restarted.
	Launchers(ctx context.Context, s Snapshot) ([]types.UID, error)
	// HandlerRecord reads virt-handler's record of the VMI's targets on
	// the node. No record (none kept, or reading records switched off)
	// is an empty one and no error.
	HandlerRecord(ctx context.Context, vmi types.UID) (HandlerRecord, error)
}

// HandlerRecord is what virt-handler's hotplug mounter recorded of one
// VMI's targets on the node, judged by kubevirt's rule
// (kubevirt.RecordedTargets): the targets it will remove itself (its
// Unmount, once their volume left the VMI's spec; its UnmountAll, when
// the VMI goes). Because that Unmount removes targets one by one before
// it rewrites its record, the engine says Stuck only once the record has
// said so, unchanged, for a while.
type HandlerRecord = kubevirt.RecordedTargets

// MountChange is one batch of mount changes the node reported.
type MountChange struct {
	// Launchers are the launcher pods whose hotplug-disks a mount was
	// attached to or detached from.
	Launchers []types.UID
	// Lost: the node dropped changes, so any launcher may have changed.
	Lost bool
}

// MountWatcher is an Engine that reports mount changes in launchers'
// hotplug-disks as they happen (engine.Engine, through package mountwatch,
// on Linux ≥ 6.15). A foreign unmount of a target, or a mount stacked on
// one, is then repaired at once; without it, at the next resync.
type MountWatcher interface {
	// WatchMounts calls changed with every batch until ctx ends, from one
	// goroutine. It returns an error wrapping errors.ErrUnsupported at once
	// when the node reports no mount changes.
	WatchMounts(ctx context.Context, changed func(MountChange)) error
}

// RuleWatcher is an Engine that reports the launchers whose device rules
// were rewritten (engine.Engine, asking the device cgroups every half
// second, on cgroup v1 every two).
type RuleWatcher interface {
	// WatchRules calls changed with every batch of launchers whose rules
	// were rewritten, by anyone, until ctx ends, from one goroutine.
	// It returns an error wrapping errors.ErrUnsupported at once when the
	// node cannot tell.
	WatchRules(ctx context.Context, changed func(MountChange)) error
}
