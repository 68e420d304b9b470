// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hpmount/hpmount/internal/sandbox"
	"golang.org/x/sys/unix"
)

// Run runs a command and fails t with its output when it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := sandbox.Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Loop is a loop device over a sparse backing file.
type Loop struct {
	Device  string // e.g. /dev/loop3
	Backing string
}

// NewLoop attaches a loop device over a new sparse file of size bytes and
// detaches it when t ends.
func NewLoop(t testing.TB, size int64) *Loop {
	t.Helper()
	RequiresRoot(t)
	backing := filepath.Join(t.TempDir(), "backing.img")
	dev, err := sandbox.NewLoop(backing, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sandbox.DetachLoop(dev) })
	return &Loop{Device: dev, Backing: backing}
}

// Grow enlarges the backing file and tells the loop driver to pick up the
// new size, as a storage backend growing a volume would.
func (l *Loop) Grow(t testing.TB, size int64) {
	t.Helper()
	if err := sandbox.GrowLoop(l.Device, l.Backing, size); err != nil {
		t.Fatal(err)
	}
}

// Dev returns the loop device's device number.
func (l *Loop) Dev(t testing.TB) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(l.Device, &st); err != nil {
		t.Fatal(err)
	}
	return st.Rdev
}

// MinXFSSize is the smallest volume mkfs.xfs accepts here.
const MinXFSSize = 300 << 20

// NewFilesystem makes a loop device of size bytes with a fresh fstype
// ("ext4" or "xfs") filesystem and mounts it at dir, unmounting it when t
// ends.
func NewFilesystem(t testing.TB, fstype string, size int64, dir string) *Loop {
	t.Helper()
	l := NewLoop(t, size)
	if fstype == "" {
		t.Fatal("NewFilesystem needs a filesystem type")
	}
	if err := sandbox.Mkfs(l.Device, fstype); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(l.Device, dir, fstype, 0, ""); err != nil {
		t.Fatalf("mount %s on %q: %v", l.Device, dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return l
}

// MakeShared bind-mounts dir onto itself and marks it shared, as the kubelet
// root is on a node, so that mounts under it reach slave namespaces.
func MakeShared(t testing.TB, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatalf("bind %q: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make %q shared: %v", dir, err)
	}
}
