// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// FilesystemUsage is what statfs(2) says about a filesystem.
type FilesystemUsage struct {
	// SizeBytes is f_blocks * f_bsize: the filesystem's data size as df
	// shows it (for ext4 and xfs, without metadata and the internal log).
	SizeBytes int64
	// FreeBytes is f_bfree * f_bsize, including blocks reserved for root.
	FreeBytes int64
	// AvailableBytes is f_bavail * f_bsize: what an unprivileged writer,
	// such as QEMU, can still allocate.
	AvailableBytes int64
	// BlockSize is f_bsize.
	BlockSize int64
}

// BlockDeviceSize returns the size in bytes of the block device major:minor,
// from sysRoot/dev/block/MAJ:MIN/size (sysRoot is normally "/sys"), which
// counts 512-byte sectors whatever the device's logical block size.
func BlockDeviceSize(sysRoot string, major, minor uint32) (int64, error) {
	return blockDeviceSize(sysRoot, major, minor)
}

// BlockDeviceGone reports that the block device major:minor no longer
// exists: sysRoot/dev/block/MAJ:MIN is missing. Any other failure of the
// look says nothing, so it is not taken as gone. It is the one rule for
// Observed.SourceGone and for diag's judgement of a block node.
func BlockDeviceGone(sysRoot string, major, minor uint32) bool {
	_, err := os.Lstat(filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	return errors.Is(err, fs.ErrNotExist)
}

// FilesystemSize runs statfs on path.
func FilesystemSize(path string) (FilesystemUsage, error) {
	return statfsPath(path)
}

// FilesystemSizeOf runs fstatfs on f, which may be an O_PATH descriptor.
func FilesystemSizeOf(f *os.File) (FilesystemUsage, error) {
	return statfsFile(f)
}
