// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"errors"
	"os"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// SlackBytes is how much larger than the filesystem the block device must
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
const SlackBytes = 16 << 20

// ErrRefused marks a refusal to look at or grow a target: it is not a
// mount, its source was deleted, its block device could not be verified, or
// the filesystem under it is not the one the device names.
var ErrRefused = errors.New("refused to grow")

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

// Options says what Grow may change.
type Options struct {
	// GrowFilesystem lets Grow grow the filesystem when its device has
	// grown; without it Grow only reports.
	GrowFilesystem bool
	// ExpandDiskImage lets Grow enlarge disk.img to KubeVirt's usable size
	// for CapacityBytes (see mount.DiskImageSize).
	ExpandDiskImage bool
	// CapacityBytes is the PVC's capacity; 0 (unknown) means no image
	// growth.
	CapacityBytes int64
	// FilesystemOverhead is KubeVirt's filesystemOverhead fraction, in
	// [0, 1).
	FilesystemOverhead float64
}

// Result reports what Grow found and did. Byte counts are 0 where not
// measured.
type Result struct {
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
	// SlackBytes.
	NeedsGrowth bool
	// DeviceSmaller says the device is smaller than the filesystem. It is
	// reported and never acted on.
	DeviceSmaller bool
	// Grown and ImageGrown say the filesystem or disk.img got larger.
	Grown, ImageGrown bool
}

// NeedsGrowth decides whether a filesystem of fsBytes on a device of
// deviceBytes should be grown: only when the device is larger by more than
// SlackBytes. A smaller device never leads to growth (or shrinking).
func NeedsGrowth(deviceBytes, fsBytes int64) bool {
	if deviceBytes <= 0 || fsBytes <= 0 {
		return false
	}
	return deviceBytes-fsBytes > SlackBytes
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
func (g *Grower) Grow(t *mountinfo.Table, targetDir, file string, opts Options) (Result, error) {
	return g.grow(t, targetDir, file, opts)
}

// Measure reports what Grow would find for file in targetDir (sizes
// of device, filesystem and disk.img, and whether growth is due) without
// changing anything: no resize call, no write. diag judges a
// volume through it, by the agent's own measurements.
func (g *Grower) Measure(t *mountinfo.Table, targetDir, file string) (Result, error) {
	return g.grow(t, targetDir, file, Options{})
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
