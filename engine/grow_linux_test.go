// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// growNode is a node with one xfs volume published for the attachment pod
// and bound into the launcher, whose device has grown since.
type growNode struct {
	e    *Engine
	v    hotplug.DesiredVolume
	mnt  string // the attachment pod's publish directory
	dir  string // the launcher's hotplug-disks
	root string
}

func newGrowNode(t *testing.T) *growNode {
	testutil.RequiresRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	n := &growNode{root: filepath.Join(dir, "kubelet")}
	n.dir = filepath.Join(n.root, kubelet.HotplugDisksDir(string(launcherUID)))
	must(t, os.MkdirAll(n.dir, 0o755))
	n.mnt = filepath.Join(n.root, kubelet.VolumesDir(string(attachUID)), "kubernetes.io~csi", "pv-fs", "mount")
	loop := testutil.NewFilesystem(t, "xfs", testutil.MinXFSSize, n.mnt)
	must(t, os.WriteFile(filepath.Join(n.mnt, "disk.img"), make([]byte, 1<<20), 0o644))
	n.e, err = New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: n.root,
		CgroupRoot: "/sys/fs/cgroup", CgroupMode: blockdev.CgroupAuto, SysRoot: "/sys", DevRoot: "/dev",
		UID: 107, GID: 107, Grow: GrowPolicy{Filesystems: true}})
	must(t, err)
	t.Cleanup(n.e.Close)
	n.v = hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID,
		Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}}
	ctx := context.Background()
	snap, err := n.e.Snapshot(ctx)
	must(t, err)
	if _, err := n.e.Attach(ctx, snap, n.v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(n.dir, "fs.img"), unix.MNT_DETACH) })
	loop.Grow(t, testutil.MinXFSSize+200<<20)
	return n
}

func (n *growNode) grow(t *testing.T) (hotplug.GrowResult, error) {
	t.Helper()
	ctx := context.Background()
	snap, err := n.e.Snapshot(ctx)
	must(t, err)
	return n.e.Grow(ctx, snap, n.v)
}

// fsBytes is the size of the filesystem under the launcher's bind.
func (n *growNode) fsBytes(t *testing.T) int64 {
	t.Helper()
	var st unix.Statfs_t
	must(t, unix.Statfs(filepath.Join(n.dir, "fs.img"), &st))
	return int64(st.Blocks) * st.Bsize
}

// TestGrowWaitsWhilePublishedIsUnknown: only kubelet.ErrNotPublished says
// the kubelet no longer grows the volume. A check that failed or hung
// says nothing, and growing then would race the kubelet's
// NodeExpandVolume: growth waits, with an error that has it tried again,
// and grows once the check answers "not published".
func TestGrowWaitsWhilePublishedIsUnknown(t *testing.T) {
	tests := []struct {
		name string
		// check stands in for kubelet.FindPublished; release ends a hang.
		check func(release <-chan struct{}) func(kubelet.Root, string, string) (string, error)
		want  error
	}{
		{"check hangs", func(release <-chan struct{}) func(kubelet.Root, string, string) (string, error) {
			return func(kubelet.Root, string, string) (string, error) {
				<-release
				return "", fmt.Errorf("volume: %w", kubelet.ErrNotPublished)
			}
		}, hotplug.ErrStuck},
		{"check fails", func(<-chan struct{}) func(kubelet.Root, string, string) (string, error) {
			return func(kubelet.Root, string, string) (string, error) {
				return "", fmt.Errorf("list the pod's volumes: %w", unix.EIO)
			}
		}, hotplug.ErrBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newGrowNode(t)
			// The kubelet unpublished the volume; the check does not tell.
			must(t, unix.Unmount(n.mnt, unix.MNT_DETACH))
			must(t, os.Remove(n.mnt))
			before := n.fsBytes(t)
			release := make(chan struct{})
			let := sync.OnceFunc(func() { close(release) })
			defer let()
			findPublished = tt.check(release)
			defer func() { findPublished = kubelet.FindPublished }()
			n.e.growth.timeout = 200 * time.Millisecond

			r, err := n.grow(t)
			if !errors.Is(err, tt.want) || r.Grown {
				t.Fatalf("grow = %+v, %v; want nothing grown and an error wrapping %v", r, err, tt.want)
			}
			if after := n.fsBytes(t); after != before {
				t.Fatalf("the filesystem grew from %d to %d bytes while the check did not tell", before, after)
			}
			if errors.Is(tt.want, hotplug.ErrStuck) {
				// Asked again while the first check hangs: refused at
				// once, and no second thread is spent on it.
				if _, err := n.grow(t); !errors.Is(err, hotplug.ErrStuck) || n.e.growth.held() != 1 {
					t.Fatalf("grow while a check hangs = %v with %d threads held; want ErrStuck and 1", err, n.e.growth.held())
				}
				let()
				waitHeld(t, n.e.growth, 0)
			}
			findPublished = kubelet.FindPublished
			n.e.growth.timeout = 0
			if r, err = n.grow(t); err != nil || !r.Grown || n.fsBytes(t) <= before {
				t.Fatalf("grow once the check answers = %+v, %v; want the filesystem grown", r, err)
			}
		})
	}
}

// waitHeld waits until c's calls given up on hold want threads; the 10 s
// deadline only detects a hang.
func waitHeld(t *testing.T, c *storageCalls, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.held() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d threads held after 10 s, want %d", c.held(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
