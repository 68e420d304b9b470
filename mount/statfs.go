// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import "os"

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

// FilesystemSize runs statfs on path.
func FilesystemSize(path string) (FilesystemUsage, error) {
	return statfsPath(path)
}

// FilesystemSizeOf runs fstatfs on f, which may be an O_PATH descriptor.
func FilesystemSizeOf(f *os.File) (FilesystemUsage, error) {
	return statfsFile(f)
}
