// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The online-resize ioctls and the structures they take, as the kernel's
// fs/xfs/libxfs/xfs_fs.h and fs/ext4/ext4.h define them. The layouts are
// written out here (golang.org/x/sys has none of them) and their sizes are
// held by TestResizeIoctlLayout, since the ioctl numbers encode them.
//
// The sizes are those of every 64-bit ABI and of the 32-bit ABIs that align
// a __u64 to 8 bytes (arm, mips). i386 packs these structures tighter; there
// the numbers match no ioctl, and the kernel refuses the call with ENOTTY
// rather than misread it.

// xfsGeometryV1 is struct xfs_fsop_geom_v1, the oldest geometry every xfs
// kernel still answers (XFS_IOC_FSGEOMETRY_V1).
type xfsGeometryV1 struct {
	BlockSize, RtExtSize, AGBlocks, AGCount uint32
	LogBlocks, SectSize, InodeSize, IMaxPct uint32
	DataBlocks, RtBlocks, RtExtents         uint64
	LogStart                                uint64
	UUID                                    [16]byte
	SUnit, SWidth                           uint32
	Version                                 int32
	Flags                                   uint32
	LogSectSize, RtSectSize, DirBlockSize   uint32
	_                                       uint32
}

// xfsGrowfsData is struct xfs_growfs_data: the new data section size in
// filesystem blocks and the inode space limit in percent. The explicit tail
// padding is the C compiler's, which Go's 32-bit ports would not add.
type xfsGrowfsData struct {
	NewBlocks uint64
	IMaxPct   uint32
	_         uint32
}

var (
	// xfsIocFSGeometryV1 is _IOR('X', 100, struct xfs_fsop_geom_v1).
	xfsIocFSGeometryV1 = ioc(iocRead, 'X', 100, unsafe.Sizeof(xfsGeometryV1{}))
	// xfsIocFSGrowFSData is _IOW('X', 110, struct xfs_growfs_data).
	xfsIocFSGrowFSData = ioc(iocWrite, 'X', 110, unsafe.Sizeof(xfsGrowfsData{}))
	// ext4IocResizeFS is _IOW('f', 16, __u64).
	ext4IocResizeFS = ioc(iocWrite, 'f', 16, unsafe.Sizeof(uint64(0)))
)

// ioc encodes an ioctl number as the kernel's _IOC does on this
// architecture.
func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<iocDirShift | size<<iocSizeShift | typ<<8 | nr
}

// ioctlPtr makes an ioctl whose argument is a pointer, keeping f open
// across the call.
func ioctlPtr(f *os.File, req uintptr, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(arg))
	runtime.KeepAlive(f)
	if errno != 0 {
		return errno
	}
	return nil
}

// GrowXFSData makes XFS_IOC_FSGROWFSDATA on f.
func (KernelIoctls) GrowXFSData(f *os.File, newBlocks uint64, imaxpct uint32) error {
	in := xfsGrowfsData{NewBlocks: newBlocks, IMaxPct: imaxpct}
	return ioctlPtr(f, xfsIocFSGrowFSData, unsafe.Pointer(&in))
}

// ResizeExt4 makes EXT4_IOC_RESIZE_FS on f.
func (KernelIoctls) ResizeExt4(f *os.File, newBlocks uint64) error {
	n := newBlocks
	return ioctlPtr(f, ext4IocResizeFS, unsafe.Pointer(&n))
}

// xfsGeometry asks the xfs holding f for its geometry. xfs logs superblock
// changes, so the on-disk superblock may lag; the ioctl answers from memory.
func xfsGeometry(f *os.File) (xfsGeometryV1, error) {
	var geo xfsGeometryV1
	err := ioctlPtr(f, xfsIocFSGeometryV1, unsafe.Pointer(&geo))
	return geo, err
}
