package agent

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"
)

// VolumeMode is the PVC's volumeMode as KubeVirt reports it in
// status.volumeStatus[].persistentVolumeClaimInfo.volumeMode.
type VolumeMode string

const (
	Filesystem VolumeMode = "Filesystem"
	Block      VolumeMode = "Block"
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
	Name        string // the VMI's volume name; the target is <Name>.img or <Name>
	Mode        VolumeMode
	LauncherUID types.UID
	Source      Source
	// CapacityBytes is the PVC capacity from the VMI status, 0 if unknown.
	CapacityBytes int64
	// FilesystemOverhead is KubeVirt's reserved fraction (0 <= x < 1).
	FilesystemOverhead float64
}

// ObservedVolume is one entry the engine found in a launcher's hotplug-disks
// directory, with what the kernel says about it.
type ObservedVolume struct {
	Name string
	Mode VolumeMode
	// Filesystem mode: the top mount on <Name>.img, if any.
	Mounted    bool
	Stacked    int    // mounts on the target; >1 is a fault the engine repairs
	SourceDev  string // "MAJ:MIN" of the mounted filesystem
	SourceRoot string // root of the bind inside that filesystem, e.g. /disk.img
	SourceGone bool   // the mounted file was deleted or its device vanished
	// Block mode: the device number the node points at.
	DeviceMajor, DeviceMinor uint32
}

// Change is what an engine call did; Unchanged means no syscall changed
// anything.
type Change string

const (
	Unchanged Change = "unchanged"
	Mounted   Change = "mounted"
	Replaced  Change = "replaced"
	Created   Change = "created" // block node made and allowed
	Removed   Change = "removed"
)

// GrowResult reports an online filesystem growth check.
type GrowResult struct {
	DeviceBytes       int64
	FilesystemBefore  int64
	FilesystemAfter   int64
	DiskImageBefore   int64
	DiskImageAfter    int64
	FilesystemType    string
	Grown, ImageGrown bool
}

// ErrNotPublished means the attachment pod does not (or no longer) publish
// the volume. For a volume whose target is already mounted and healthy this
// is the normal state after the attachment pod is replaced.
var ErrNotPublished = errors.New("volume is not published by the attachment pod")

// Snapshot is one read of the host mount table, shared by every call of a
// batch so that a batch costs one mountinfo scan.
type Snapshot interface {
	// Entries is the number of mounts read, for metrics.
	Entries() int
}

// Engine is the node side: everything that touches the host's mounts,
// device nodes and cgroups. Every method is idempotent.
type Engine interface {
	Snapshot(ctx context.Context) (Snapshot, error)
	// Observe lists what is in the launcher's hotplug-disks directory. A
	// launcher whose directory does not exist yields no entries and no error.
	Observe(ctx context.Context, s Snapshot, launcher types.UID) ([]ObservedVolume, error)
	Attach(ctx context.Context, s Snapshot, v DesiredVolume) (Change, error)
	Detach(ctx context.Context, s Snapshot, launcher types.UID, o ObservedVolume) (Change, error)
	// Grow checks a mounted filesystem-mode volume for a grown device and
	// grows its filesystem (and, if enabled, its disk.img) online.
	Grow(ctx context.Context, s Snapshot, v DesiredVolume) (GrowResult, error)
	// Launchers lists the pods whose hotplug-disks directory holds
	// anything, so that what a deleted launcher left is found even after
	// the agent restarted.
	Launchers(ctx context.Context, s Snapshot) ([]types.UID, error)
}
