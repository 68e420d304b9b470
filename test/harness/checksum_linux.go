// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/test/simnode"
)

// SourceSHA256 is the hex sha256 of n bytes at off of a volume's source,
// read as ReadSource reads it: the raw device of a block volume, or
// disk.img through a second mount of the device. It needs neither the
// attachment pod nor the launcher, so it also checks a volume that was
// unplugged.
func SourceSHA256(d *simnode.Disk, block bool, off, n int64) (string, error) {
	if block {
		return sumRange(d.Device, off, n)
	}
	dir, err := os.MkdirTemp("", "hpmount-sum-")
	if err != nil {
		return "", err
	}
	defer os.Remove(dir)
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		return "", fmt.Errorf("mount %s on %q: %w", d.Device, dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	return sumRange(filepath.Join(dir, "disk.img"), off, n)
}

func sumRange(path string, off, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, off, n)); err != nil {
		return "", fmt.Errorf("read %q: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
