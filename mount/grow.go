// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// Online growth of a hotplugged filesystem-mode volume.
//
// When a second volume is hotplugged, KubeVirt replaces the attachment pod and
// the kubelet unpublishes and unstages the first PVC from it. No CSI
// NodeExpandVolume will run for that PVC again: if it is expanded, its block
// device grows but its filesystem does not. The launcher's file bind of
// disk.img still holds that filesystem's superblock, so the agent can find it
// from the launcher's <vol>.img alone (mount id -> mountinfo -> major:minor)
// and grow it with the filesystem's own online-resize ioctl
// (XFS_IOC_FSGROWFSDATA, EXT4_IOC_RESIZE_FS) issued on a file descriptor of
// that very bind, with no help from the attachment pod.
//
// Nothing is mounted and nothing is exec'd for it. An agent killed in the
// middle of a growth leaves only what the kernel finishes or undoes on its
// own: an open file descriptor, closed with the process. Earlier versions
// mounted the device again under a private directory and ran xfs_growfs or
// resize2fs there, which a SIGKILL between mount and unmount left mounted for
// good; Sweep still removes such leftovers after an upgrade.

// GrowSlackBytes is how much larger than the filesystem the block device must
// be before a growth is attempted. The comparison is between the device size
// and the filesystem's own size (ext2/3/4 superblock block count, xfs data
// blocks from its geometry), which both cover the whole device after mkfs or a
// resize, metadata included. They still differ by a tail the tools cannot
// use: the kernel's ext4 resize (like mkfs.ext4) drops a last block group too
// small for its own metadata (the inode table alone is 2 MiB per group at the
// default inode ratio, 8 MiB at -i 4096), and xfs's drops a last allocation
// group under 64 blocks (4 MiB with 64 KiB blocks). A slack below
// that tail would retry a growth that can never happen on every check, so it
// is 16 MiB, which is still far below the smallest volume expansion anyone
// asks for in practice (storage classes allocate in GiB).
const GrowSlackBytes = 16 << 20

// ErrGrowRefused marks a refusal to look at or grow a target: it is not a
// mount, its source was deleted, its block device could not be verified, or
// the filesystem under it is not the one the device names.
var ErrGrowRefused = errors.New("refused to grow")

// ErrNoCapSysResource is wrapped when online ext2/3/4 growth failed and the
// agent lacks CAP_SYS_RESOURCE, which the kernel's EXT4_IOC_RESIZE_FS needs.
var ErrNoCapSysResource = errors.New("the agent lacks CAP_SYS_RESOURCE, which online ext4 growth needs; run the DaemonSet privileged")

// ResizeIoctls are the kernel's online-resize calls, made on an open,
// readable file of a mounted filesystem; they grow the filesystem that holds
// the file. Each returns the call's error as is (an errno), so that a caller
// can tell a resize already running (EBUSY from ext4, EAGAIN from xfs) or a
// missing capability (EPERM) apart. Tests inject a fake to produce those.
type ResizeIoctls interface {
	// GrowXFSData is XFS_IOC_FSGROWFSDATA: grow the data section to
	// newBlocks filesystem blocks, keeping the inode space limit imaxpct
	// (a percentage). The kernel needs CAP_SYS_ADMIN.
	GrowXFSData(f *os.File, newBlocks uint64, imaxpct uint32) error
	// ResizeExt4 is EXT4_IOC_RESIZE_FS: grow an ext2/3/4 filesystem to
	// newBlocks blocks. The kernel needs CAP_SYS_RESOURCE.
	ResizeExt4(f *os.File, newBlocks uint64) error
}

// KernelIoctls makes the real calls.
type KernelIoctls struct{}

var _ ResizeIoctls = KernelIoctls{}

// Grower finds and grows the filesystem under a launcher's file bind.
type Grower struct {
	// NS is the host mount namespace; every step runs inside it.
	NS *isolation.MountNamespace
	// KubeletRoot is the kubelet root directory in the host namespace.
	KubeletRoot string
	// SysRoot is sysfs, normally "/sys".
	SysRoot string
	// DevRoot is the host's device directory, normally "/dev".
	DevRoot string
	// PrivateDir is where versions of the agent that grew through a
	// second mount made it, e.g. /run/hpmount/grow. Growth no longer uses
	// it; only Sweep looks there, for what such a version left behind.
	PrivateDir string
	// Ioctls makes the resize calls; nil means KernelIoctls.
	Ioctls ResizeIoctls

	// beforeResize, when set (by tests), runs between a growth's
	// measurement and its resize call, where another resizer may act.
	beforeResize func()
}

// GrowOptions says what Grow may change.
type GrowOptions struct {
	// GrowFilesystem lets Grow grow the filesystem when its device has
	// grown; without it Grow only reports.
	GrowFilesystem bool
	// ExpandDiskImage lets Grow enlarge disk.img to KubeVirt's usable size
	// for CapacityBytes (see DiskImageSize).
	ExpandDiskImage bool
	// CapacityBytes is the PVC's capacity; 0 (unknown) means no image
	// growth.
	CapacityBytes int64
	// FilesystemOverhead is KubeVirt's filesystemOverhead fraction, in
	// [0, 1).
	FilesystemOverhead float64
}

// GrowResult reports what Grow found and did. Byte counts are 0 where not
// measured.
type GrowResult struct {
	// Device is the block device's node, e.g. /dev/loop3.
	Device string
	// Dev is the device as "MAJ:MIN".
	Dev string
	// FSType is the filesystem type from mountinfo.
	FSType string
	// DeviceBytes is the block device's size.
	DeviceBytes int64
	// FilesystemBytes is the filesystem's own size (all of its blocks,
	// metadata included) before any growth: what DeviceBytes is compared
	// with.
	FilesystemBytes int64
	// FilesystemBefore and FilesystemAfter are statfs sizes
	// (f_blocks*f_bsize) seen through the target.
	FilesystemBefore, FilesystemAfter int64
	// DiskImageBefore and DiskImageAfter are disk.img's apparent sizes.
	DiskImageBefore, DiskImageAfter int64
	// NeedsGrowth says the device exceeds the filesystem by more than
	// GrowSlackBytes.
	NeedsGrowth bool
	// DeviceSmaller says the device is smaller than the filesystem. It is
	// reported and never acted on.
	DeviceSmaller bool
	// Grown and ImageGrown say the filesystem or disk.img got larger.
	Grown, ImageGrown bool
}

// NeedsGrowth decides whether a filesystem of fsBytes on a device of
// deviceBytes should be grown: only when the device is larger by more than
// GrowSlackBytes. A smaller device never leads to growth (or shrinking).
func NeedsGrowth(deviceBytes, fsBytes int64) bool {
	if deviceBytes <= 0 || fsBytes <= 0 {
		return false
	}
	return deviceBytes-fsBytes > GrowSlackBytes
}

// DiskImageSize is the size KubeVirt gives a disk.img: with usable = free +
// allocated (the free space of the filesystem plus what the image already
// occupies), it is (1 - overhead) * min(capacity, usable), aligned down to
// 1 MiB. A capacity of 0 or less (unknown) gives 0, meaning "leave the image
// alone". The overhead must be in [0, 1).
func DiskImageSize(capacity int64, overhead float64, free, allocated int64) (int64, error) {
	if math.IsNaN(overhead) || overhead < 0 || overhead >= 1 {
		return 0, fmt.Errorf("filesystem overhead %v is not in [0, 1)", overhead)
	}
	if capacity <= 0 {
		return 0, nil
	}
	usable := max(free, 0) + max(allocated, 0)
	size := min(capacity, usable)
	size = int64((1 - overhead) * float64(size))
	return size &^ (1<<20 - 1), nil
}

// Grow looks at the filesystem mounted on file in targetDir (the
// launcher's hotplug-disks directory, relative to KubeletRoot, and a file
// target's name there: kubelet.TargetName) and, as opts
// allow, grows it to its block device and enlarges disk.img. All of it runs
// in g.NS and needs nothing from the attachment pod; t is a scan of that
// namespace's mount table.
//
// The target must be a mount (its mount id differs from its directory's) that
// t knows and whose source was not deleted. Its block device is found by the
// mount's major:minor through SysRoot and must be a block device node under
// DevRoot with that number. The filesystem is grown only when NeedsGrowth
// says so, never shrunk, to the whole device, by its online-resize ioctl on
// the target itself: the checked descriptor of the target is opened again
// read-only and must still be the same inode. Nothing is mounted or exec'd.
// A read-only filesystem or a read-only bind is refused, since the kernel
// takes write access through the mount the call is made on. disk.img is only
// ever made larger, sparsely.
//
// A growth of a frozen filesystem waits in the kernel; g.NS's timeout
// bounds how long Grow waits for it. A growth given up on that way changes
// nothing after the thaw: it waits for the filesystem to take writes before
// each resize or enlargement and, right before making it, stops if its
// caller gave up (isolation.Live), since a later check may have decided
// otherwise from newer facts.
func (g *Grower) Grow(t *mountinfo.Table, targetDir, file string, opts GrowOptions) (GrowResult, error) {
	return g.grow(t, targetDir, file, opts)
}

// Measure reports what Grow would find for file in targetDir (sizes
// of device, filesystem and disk.img, and whether growth is due) without
// changing anything: no resize call, no write. diag judges a
// volume through it, by the agent's own measurements.
func (g *Grower) Measure(t *mountinfo.Table, targetDir, file string) (GrowResult, error) {
	return g.grow(t, targetDir, file, GrowOptions{})
}

// Sweep unmounts and removes the temporary growth mounts (grow-*) that an
// older version of the agent left under PrivateDir when it was killed
// between a growth's mount and its unmount, as t lists them, and says how
// many there were. Growth itself mounts nothing any more; the sweep stays so
// that an upgraded node is cleaned once. Call it at start.
func (g *Grower) Sweep(t *mountinfo.Table) (int, error) { return g.sweep(t) }

func (g *Grower) ioctls() ResizeIoctls {
	if g.Ioctls == nil {
		return KernelIoctls{}
	}
	return g.Ioctls
}
