// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

// hang bounds each test's QMP exchanges: it only turns a hang into a
// failure, a healthy test needs a small fraction of it.
const hang = 2 * time.Minute

func start(t *testing.T, o Options) (*QEMU, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	q, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		q.Kill()
		if t.Failed() {
			t.Logf("qemu stderr: %s", q.Stderr())
		}
	})
	return q, ctx
}

func sparseFile(t *testing.T, dir string, size int64) string {
	t.Helper()
	path := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(path, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDiskLifecycle walks one disk image through everything the scenarios
// ask of QEMU, checking each answer against the file on the host.
func TestDiskLifecycle(t *testing.T) {
	q, ctx := start(t, Options{})
	img := sparseFile(t, t.TempDir(), 64<<20)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.BlockdevAdd(ctx, "vol", File{Path: img, Direct: true}))
	must(q.DeviceAdd(ctx, "disk-vol", "vol", "rp1"))
	must(q.WritePattern(ctx, "disk-vol", 0x5a, 1<<20, 1<<20))
	must(q.ReadPattern(ctx, "disk-vol", 0x5a, 1<<20, 1<<20))
	if err := q.ReadPattern(ctx, "disk-vol", 0x5b, 1<<20, 1<<20); err == nil || !strings.Contains(err.Error(), "verification failed") {
		t.Fatalf("read of the wrong pattern: %v, want a verification failure", err)
	}
	if err := q.ReadPattern(ctx, "disk-vol", 0, 80<<20, 4096); err == nil || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("read past the end: %v, want a failure", err)
	}
	got := readAt(t, img, 1<<20, 1<<20)
	if !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 1<<20)) {
		t.Fatal("the host's file does not hold what QEMU wrote")
	}

	must(q.BlockResize(ctx, "vol", 96<<20))
	size, err := q.DeviceSize(ctx, "disk-vol")
	must(err)
	if fi, err := os.Stat(img); err != nil || size != 96<<20 || fi.Size() != 96<<20 {
		t.Fatalf("after block_resize QEMU says %d bytes, the file has %v (%v); want %d", size, fi.Size(), err, 96<<20)
	}

	must(q.DeviceDel(ctx, "disk-vol"))
	must(q.BlockdevDel(ctx, "vol"))
	infos, err := q.QueryBlock(ctx)
	must(err)
	if len(infos) != 0 {
		t.Fatalf("query-block after unplug: %+v", infos)
	}
	if open := heldBy(t, q.Pid, img); open {
		t.Fatalf("qemu %d still holds %s after blockdev-del", q.Pid, img)
	}
}

// TestDumpGuestMemory: QEMU writes an ELF core of the guest's RAM into a
// file it opens itself, complete when the command returns.
func TestDumpGuestMemory(t *testing.T) {
	q, ctx := start(t, Options{MemoryMiB: 16, RootPorts: 1})
	path := filepath.Join(t.TempDir(), "memory.dump")
	if err := q.DumpGuestMemory(ctx, path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 16<<20 {
		t.Fatalf("dump %s has %d bytes, want at least the guest's 16 MiB", path, fi.Size())
	}
	if magic := readAt(t, path, 0, 4); string(magic) != "\x7fELF" {
		t.Fatalf("dump starts with %q, want an ELF header", magic)
	}
}

// TestMigration: a target QEMU opens the same disk while the source runs
// (inactive, so the source's write lock does not refuse it), and after
// the migration reads through its own device what the source wrote; the
// source keeps its descriptor until it stops.
func TestMigration(t *testing.T) {
	dir := t.TempDir()
	img := sparseFile(t, dir, 16<<20)
	src, ctx := start(t, Options{MemoryMiB: 16, RootPorts: 1})
	dst, _ := start(t, Options{MemoryMiB: 16, RootPorts: 1, Incoming: true})
	for _, q := range []*QEMU{src, dst} {
		if err := q.BlockdevAdd(ctx, "vol", File{Path: img, Direct: true}); err != nil {
			t.Fatal(err)
		}
		if err := q.DeviceAdd(ctx, "disk-vol", "vol", "rp1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.WritePattern(ctx, "disk-vol", 0x3e, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	uri := "unix:" + filepath.Join(dir, "migration.sock")
	if err := dst.MigrateIncoming(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if err := src.Migrate(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if err := dst.ReadPattern(ctx, "disk-vol", 0x3e, 0, 1<<20); err != nil {
		t.Fatalf("the target does not read what the source wrote: %v", err)
	}
	if err := dst.WritePattern(ctx, "disk-vol", 0x3f, 1<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if !heldBy(t, src.Pid, img) {
		t.Fatalf("the source QEMU let go of %s before it stopped", img)
	}
}

// heldBy says whether pid has a descriptor on path.
func heldBy(t *testing.T, pid int, path string) bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, _ := os.Readlink(filepath.Join(dir, e.Name())); l == path {
			return true
		}
	}
	return false
}

// TestRefusals holds the client to QEMU's refusals: each is an *Error
// carrying QEMU's reason, never a hang or a silent success.
func TestRefusals(t *testing.T) {
	q, ctx := start(t, Options{RootPorts: 1})
	img := sparseFile(t, t.TempDir(), 8<<20)
	if err := q.BlockdevAdd(ctx, "ok", File{Path: img}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"missing file", func() error { return q.BlockdevAdd(ctx, "missing", File{Path: img + ".missing"}) }, "No such file"},
		{"no hotplug on the root bus", func() error { return q.DeviceAdd(ctx, "d0", "ok", "pcie.0") }, "does not support hotplugging"},
		{"no such port", func() error { return q.DeviceAdd(ctx, "d0", "ok", "rp9") }, "rp9"},
		{"unknown device for qemu-io", func() error { _, err := q.QemuIO(ctx, "nodev", "read 0 512"); return err }, "nodev"},
		{"unknown device for device_del", func() error { return q.DeviceDel(ctx, "nodev") }, "nodev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	var qerr *Error
	if err := q.BlockdevAdd(ctx, "missing", File{Path: img + ".missing"}); !errors.As(err, &qerr) || qerr.Class != "GenericError" {
		t.Fatalf("got %v, want a QMP GenericError", err)
	}
	// The node of a failed blockdev-add is not left behind: the name is
	// free again.
	if err := q.BlockdevAdd(ctx, "missing", File{Path: img}); err != nil {
		t.Fatal(err)
	}
}

// TestStartFailsWhenQEMUExits: a QEMU that dies before accepting QMP fails
// Start with its stderr, without a wait.
func TestStartFailsWhenQEMUExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	_, err := Start(ctx, Options{Binary: "/nonexistent/qemu"})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("got %v (ctx %v), want an error before the deadline", err, ctx.Err())
	}
}

// TestAsLauncher runs QEMU as a virt-launcher's: uid/gid 107, in a device
// cgroup that denies block devices, in a mount namespace where the volume
// is at a path the host does not have. QEMU's open of the block device is
// refused with EPERM until the device rule is granted, and what QEMU then
// writes lands on the device.
func TestAsLauncher(t *testing.T) {
	testutil.RequiresRoot(t)
	dev := testutil.NewLoop(t, 16<<20).Device
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	seen := filepath.Join(t.TempDir(), "hotplug-disks")
	if err := os.Mkdir(seen, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(host), host, filepath.Dir(seen)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	node := filepath.Join(host, "raw")
	if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(node, 107, 107); err != nil {
		t.Fatal(err)
	}
	l := testutil.StartLauncher(t)
	l.Exec(t, fmt.Sprintf("mount --bind %s %s", host, seen))
	if _, err := os.Stat(filepath.Join(seen, "raw")); !os.IsNotExist(err) {
		t.Fatalf("the host sees the launcher's bind: %v", err)
	}
	cg := deviceCgroup(t)
	q, ctx := start(t, Options{MountNamespaceOf: l.Pid, UID: 107, GID: 107, Cgroups: []string{cg}})

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", q.Pid))
	if err != nil || !strings.Contains(string(status), "\nUid:\t107\t107\t107\t107\n") {
		t.Fatalf("qemu %d does not run as uid 107: %v\n%s", q.Pid, err, status)
	}
	if procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err != nil || !strings.Contains(string(procs), fmt.Sprint(q.Pid)) {
		t.Fatalf("qemu %d is not in %s: %q %v", q.Pid, cg, procs, err)
	}
	f := File{Path: filepath.Join(seen, "raw"), Block: true, Direct: true, AIO: "native"}
	err = q.BlockdevAdd(ctx, "raw", f)
	if err == nil || !strings.Contains(err.Error(), "Operation not permitted") {
		t.Fatalf("blockdev-add before the device rule: %v, want EPERM", err)
	}
	rule := fmt.Sprintf("b %d:%d rw", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	if err := os.WriteFile(filepath.Join(cg, "devices.allow"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := q.BlockdevAdd(ctx, "raw", f); err != nil {
		t.Fatalf("blockdev-add after %q: %v", rule, err)
	}
	if err := q.DeviceAdd(ctx, "disk-raw", "raw", "rp1"); err != nil {
		t.Fatal(err)
	}
	if err := q.WritePattern(ctx, "disk-raw", 0x6b, 4096, 64<<10); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, dev, 4096, 64<<10); !bytes.Equal(got, bytes.Repeat([]byte{0x6b}, 64<<10)) {
		t.Fatalf("%s does not hold what QEMU wrote", dev)
	}
}

// readAt reads n bytes at off of path, bypassing nothing: QEMU wrote with
// O_DIRECT, which invalidated any cached pages.
func readAt(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// deviceCgroup makes a v1 device cgroup as a container runtime leaves a
// container's: block devices denied, the usual char devices allowed.
func deviceCgroup(t *testing.T) string {
	t.Helper()
	dir := fmt.Sprintf("/sys/fs/cgroup/devices/hpmount-qemu-test-%d", rand.Uint32())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after QEMU is killed (cleanups run last first).
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
	})
	for _, w := range [][2]string{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"}, {"devices.allow", "c 1:5 rwm"},
		{"devices.allow", "c 1:8 rwm"}, {"devices.allow", "c 1:9 rwm"}, {"devices.allow", "c 136:* rwm"}} {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
