// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// newCgroupTree creates base/<rel> under a cgroup hierarchy, with base a
// fresh hpmount-test-<rand> directory, and removes it all (killing what
// runs inside, leaves first) when t ends. It returns base.
func newCgroupTree(t testing.TB, hierarchy string, rels ...string) string {
	t.Helper()
	testutil.RequiresRoot(t)
	base := filepath.Join(hierarchy, fmt.Sprintf("hpmount-test-%d-%08x", os.Getpid(), rand.Uint32()))
	created := []string{base}
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatalf("create test cgroup: %v", err)
	}
	t.Cleanup(func() {
		for _, dir := range slices.Backward(created) {
			removeCgroup(t, dir)
		}
	})
	for _, rel := range rels {
		dir := base
		for _, part := range strings.Split(rel, "/") {
			dir = filepath.Join(dir, part)
			if slices.Contains(created, dir) {
				continue
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatalf("create test cgroup: %v", err)
			}
			created = append(created, dir)
		}
	}
	return base
}

func removeCgroup(t testing.TB, dir string) {
	var err error
	for i := 0; i < 100; i++ {
		if procs, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(procs)) {
				if pid, perr := strconv.Atoi(f); perr == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("remove test cgroup %q: %v", dir, err)
}

// mknodIn makes a device node in dir and returns its path.
func mknodIn(t *testing.T, dir, name string, typ uint32, major, minor uint32) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := unix.Mknod(p, typ|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatalf("mknod %q: %v", p, err)
	}
	return p
}

// canOpen starts a shell, moves it into cgroup before it opens node for
// reading, and reports whether the open worked. A failure other than EPERM
// fails t.
func canOpen(t *testing.T, cgroup, node string) bool {
	t.Helper()
	cmd := exec.Command("sh", "-c", `read x; exec 3<"$1" && echo ok`, "sh", node)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(cgroup, "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("move shell into %q: %v", procs, err)
	}
	_, _ = stdin.Write([]byte("go\n"))
	_ = stdin.Close()
	err = cmd.Wait()
	s := strings.TrimSpace(out.String())
	if err == nil && s == "ok" {
		return true
	}
	if !strings.Contains(s, "Operation not permitted") {
		t.Fatalf("open %q in cgroup %q failed other than with EPERM: %v: %s", node, cgroup, err, s)
	}
	return false
}

// testDevices is a loop device and /dev/null and /dev/urandom nodes, all
// made in a temporary directory.
type testDevices struct {
	loop      Device
	loopNode  string
	nullNode  string // c 1:3
	urandNode string // c 1:9
}

func newTestDevices(t *testing.T) testDevices {
	t.Helper()
	l := testutil.NewLoop(t, 1<<20)
	rdev := l.Dev(t)
	dir := t.TempDir()
	d := Device{Major: unix.Major(rdev), Minor: unix.Minor(rdev)}
	return testDevices{
		loop:      d,
		loopNode:  mknodIn(t, dir, "vol", unix.S_IFBLK, d.Major, d.Minor),
		nullNode:  mknodIn(t, dir, "null", unix.S_IFCHR, 1, 3),
		urandNode: mknodIn(t, dir, "urandom", unix.S_IFCHR, 1, 9),
	}
}

type wantOpen struct{ loop, null, urandom bool }

func (d testDevices) check(t *testing.T, step, cgroup string, want wantOpen) {
	t.Helper()
	got := wantOpen{canOpen(t, cgroup, d.loopNode), canOpen(t, cgroup, d.nullNode), canOpen(t, cgroup, d.urandNode)}
	if got != want {
		t.Fatalf("%s: opens (loop, null, urandom) = %+v, want %+v", step, got, want)
	}
}

func checkAllowed(t *testing.T, r DeviceRules, c Container, dev Device, want bool) {
	t.Helper()
	got, err := r.Allowed(c, dev)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Allowed(%v) = %v, want %v", dev, got, want)
	}
}
