// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"os"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestFilesystemSize(t *testing.T) {
	const mib = int64(1 << 20)
	dir := t.TempDir()
	testutil.NewFilesystem(t, "ext4", 64*mib, dir)
	usage, err := FilesystemSize(dir)
	if err != nil {
		t.Fatal(err)
	}
	if usage.SizeBytes <= 0 || usage.SizeBytes > 64*mib || usage.AvailableBytes > usage.FreeBytes || usage.FreeBytes > usage.SizeBytes || usage.BlockSize == 0 {
		t.Errorf("FilesystemSize = %+v", usage)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if byFd, err := FilesystemSizeOf(f); err != nil || byFd != usage {
		t.Errorf("FilesystemSizeOf = %+v, %v; want %+v", byFd, err, usage)
	}
}
