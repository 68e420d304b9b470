// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func statfsPath(path string) (FilesystemUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FilesystemUsage{}, fmt.Errorf("statfs %q: %w", path, err)
	}
	return usageOf(&st), nil
}

func statfsFile(f *os.File) (FilesystemUsage, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return FilesystemUsage{}, fmt.Errorf("statfs %q: %w", f.Name(), err)
	}
	return usageOf(&st), nil
}

func usageOf(st *unix.Statfs_t) FilesystemUsage {
	bs := int64(st.Bsize)
	return FilesystemUsage{
		SizeBytes:      int64(st.Blocks) * bs,
		FreeBytes:      int64(st.Bfree) * bs,
		AvailableBytes: int64(st.Bavail) * bs,
		BlockSize:      bs,
	}
}
