// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// blockDeviceSize reads the sysfs size attribute with plain syscalls: the
// growth check reads it for every volume on every resync, and os.ReadFile
// adds an fstat and, for a pollable sysfs file, the netpoller's register
// and unregister to each read.
func blockDeviceSize(sysRoot string, major, minor uint32) (int64, error) {
	p := filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", major, minor), "size")
	b, err := readSmall(p)
	if err != nil {
		return 0, fmt.Errorf("block device size %d:%d: %w", major, minor, err)
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || sectors < 0 || sectors > (1<<63-1)/512 {
		return 0, fmt.Errorf("block device size %d:%d: %q holds %q, not a sector count", major, minor, p, strings.TrimSpace(string(b)))
	}
	return sectors * 512, nil
}

// readSmall reads a sysfs attribute of at most a few dozen bytes, which
// sysfs returns whole in one read.
func readSmall(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var buf [64]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: p, Err: err}
	}
	return buf[:n], nil
}
