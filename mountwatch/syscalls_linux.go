// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mountNamespaceID returns the 64-bit id of the mount namespace behind
// nsFd, which statmount(2) and listmount(2) take to look beyond the
// caller's own namespace.
func mountNamespaceID(nsFd int) (uint64, error) {
	var id uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(nsFd), uintptr(unix.NS_GET_MNTNS_ID), uintptr(unsafe.Pointer(&id)))
	if errno != 0 {
		return 0, fmt.Errorf("ioctl NS_GET_MNTNS_ID: %w", errno)
	}
	return id, nil
}

// listMounts returns the unique id of every mount of namespace ns.
func listMounts(ns uint64) ([]uint64, error) {
	var all []uint64
	buf := make([]uint64, 4096)
	req := mntIDReq{Size: mntIDReqSizeVer1, MntID: lsmtRoot, MntNsID: ns}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_LISTMOUNT, uintptr(unsafe.Pointer(&req)),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
		if errno != 0 {
			return nil, fmt.Errorf("listmount: %w", errno)
		}
		all = append(all, buf[:n]...)
		if int(n) < len(buf) {
			return all, nil
		}
		req.Param = buf[n-1] // continue after the last id listed
	}
}

// errGone is returned by mountPoint for a mount that no longer exists.
var errGone = errors.New("the mount no longer exists")

// mountPoint returns where mount id of namespace ns is mounted, as the
// namespace's root sees it, in buf, which is reused between calls: the
// answer is valid until the next one.
func mountPoint(ns, id uint64, buf *[]byte) ([]byte, error) {
	req := mntIDReq{Size: mntIDReqSizeVer1, MntID: id, Param: statmountMntPoint, MntNsID: ns}
	for {
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)),
			uintptr(unsafe.Pointer(&(*buf)[0])), uintptr(len(*buf)), 0, 0, 0)
		switch {
		case errno == unix.EOVERFLOW && len(*buf) < 1<<20:
			*buf = make([]byte, 2*len(*buf))
			continue
		case errno == unix.ENOENT:
			return nil, errGone
		case errno != 0:
			return nil, fmt.Errorf("statmount of mount %d: %w", id, errno)
		}
		return parseMountPoint(*buf)
	}
}

// Offsets of the fields of struct statmount read; TestABI holds
// statmountFixed to the kernel's layout. They are read in place: a
// node's every mount is asked at start, and decoding the whole structure
// each time cost more than the syscall.
const (
	offSize     = unsafe.Offsetof(statmountFixed{}.Size)
	offMask     = unsafe.Offsetof(statmountFixed{}.Mask)
	offMntPoint = unsafe.Offsetof(statmountFixed{}.MntPoint)
)

// parseMountPoint returns the mount point in a struct statmount, a slice
// of b.
func parseMountPoint(b []byte) ([]byte, error) {
	if len(b) < statmountStr {
		return nil, fmt.Errorf("statmount answer of %d bytes is shorter than its fixed part", len(b))
	}
	if binary.NativeEndian.Uint64(b[offMask:])&statmountMntPoint == 0 {
		return nil, errors.New("statmount did not report the mount point")
	}
	size := binary.NativeEndian.Uint32(b[offSize:])
	point := binary.NativeEndian.Uint32(b[offMntPoint:])
	end := min(int(size), len(b))
	at := statmountStr + int(point)
	if at >= end {
		return nil, fmt.Errorf("statmount mount point offset %d is beyond its %d bytes", point, size)
	}
	str := b[at:end]
	if i := bytes.IndexByte(str, 0); i >= 0 {
		str = str[:i]
	}
	return str, nil
}
