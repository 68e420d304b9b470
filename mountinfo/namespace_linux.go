// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statmount(2) and listmount(2) in a mount namespace other than the
// caller's (Linux 6.11), for package mountwatch, which follows the host's
// mounts from the agent's own namespace. The kernel ABI stays here, in
// statmount_linux.go.

// ErrMountGone is MountPointIn's error for a mount that no longer exists.
var ErrMountGone = errors.New("the mount no longer exists")

// lsmtRoot asks listmount(2) for every mount of the namespace.
const lsmtRoot = ^uint64(0)

// NamespaceID returns the 64-bit id of the mount namespace behind nsFd,
// by which ListMountsIn and MountPointIn look in it.
func NamespaceID(nsFd int) (uint64, error) {
	var id uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(nsFd), uintptr(unix.NS_GET_MNTNS_ID), uintptr(unsafe.Pointer(&id)))
	if errno != 0 {
		return 0, fmt.Errorf("ioctl NS_GET_MNTNS_ID: %w", errno)
	}
	return id, nil
}

// ListMountsIn returns the unique id of every mount of namespace ns.
func ListMountsIn(ns uint64) ([]uint64, error) {
	ids, err := listmountIn(ns, lsmtRoot)
	if err != nil {
		return nil, fmt.Errorf("listmount: %w", err)
	}
	return ids, nil
}

// MountPointBuffer is MountPointIn's buffer, kept between calls: a node's
// every mount is asked at once when a watch starts, and an allocation
// each cost more than the syscall.
type MountPointBuffer struct{ buf statBuf }

// MountPointIn returns where mount id of namespace ns is mounted, as the
// namespace's root sees it. The bytes are b's, valid until its next use.
func MountPointIn(ns, id uint64, b *MountPointBuffer) ([]byte, error) {
	if b.buf == nil {
		b.buf = make(statBuf, statmountSize/8)
	}
	sm, err := statmountIn(ns, id, smMntPoint, &b.buf)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, ErrMountGone
	case err != nil:
		return nil, fmt.Errorf("statmount of mount %d: %w", id, err)
	}
	point := sm.bytes(b.buf, smMntPoint, sm.mntPoint)
	if len(point) == 0 {
		return nil, fmt.Errorf("statmount of mount %d reported no mount point", id)
	}
	return point, nil
}
