// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func blockDeviceSize(sysRoot string, major, minor uint32) (int64, error) {
	p := filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", major, minor), "size")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("block device size %d:%d: %w", major, minor, err)
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || sectors < 0 || sectors > (1<<63-1)/512 {
		return 0, fmt.Errorf("block device size %d:%d: %q holds %q, not a sector count", major, minor, p, strings.TrimSpace(string(b)))
	}
	return sectors * 512, nil
}

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
