// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// fakeDaemon starts sleep under a daemon's name (argv[0]), marked with o
// when o is not nil, and reaps it when it exits; done is closed then.
func fakeDaemon(t *testing.T, name string, o *owner) (pid int, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "600")
	cmd.Args[0] = name
	// Not the harness's own mark, which a Stack started earlier in this
	// process set (markOwner): an unmarked daemon must be unmarked
	// whichever test ran first.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, ownerEnv+"=") })
	if o != nil {
		cmd.Env = append(cmd.Env, ownerEnv+"="+o.encode())
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd.Process.Pid, exited
}

// deadOwner is the mark of a harness process that has exited.
func deadOwner(t *testing.T, node, dir string) *owner {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return &owner{Node: node, Dir: dir, PID: cmd.Process.Pid, Start: 1}
}

// TestSnapshotCountsHarnessProcesses: a process a Stack started (marked)
// and still running is something a teardown left, reported as such; an
// unmarked process of the same name is someone else's.
func TestSnapshotCountsHarnessProcesses(t *testing.T) {
	testutil.RequiresRoot(t)
	before := TakeSnapshot()
	marked, _ := fakeDaemon(t, "kubelet", deadOwner(t, "realnode-snapshot", ""))
	other, _ := fakeDaemon(t, "kubelet", nil)
	left := before.Added(TakeSnapshot())
	if want := fmt.Sprintf("process kubelet %d", marked); !slices.Contains(left, want) {
		t.Fatalf("left = %q, want %q", left, want)
	}
	if slices.Contains(left, fmt.Sprintf("process kubelet %d", other)) {
		t.Fatalf("an unmarked kubelet counted as the harness's: %q", left)
	}
}

// TestStartClearsLeftovers: a harness that died without a teardown (a
// panic in DeployAgent did) left the node's CNI bridge, a containerd shim,
// a container's process in the node's cgroups, and its directory with a
// mount and a loop device in it; the next run failed at once with "File
// exists". The shared node now starts over all of it, and none of it is
// left. It runs first, so that it is the package's one start of the
// shared node.
func TestStartClearsLeftovers(t *testing.T) {
	testutil.RequiresRoot(t)
	stopShared(t)
	stale, err := os.MkdirTemp("", "hpmount-realnode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountUnder(stale); _ = os.RemoveAll(stale) })
	mnt := filepath.Join(stale, "node", "kubelet")
	if err := os.MkdirAll(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(stale, "node", "csi.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil || os.Truncate(img, 16<<20) != nil {
		t.Fatalf("backing file: %v", err)
	}
	if out, err := exec.Command("losetup", "-f", img).CombinedOutput(); err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	if err := makeBridge(testNode); err != nil {
		t.Fatal(err)
	}
	shim, shimDone := fakeDaemon(t, "containerd-shim-runc-v2", deadOwner(t, testNode, stale))
	container := staleContainer(t)

	sharedEnv(t)
	<-shimDone // killed: clearLeftovers waited until it exited
	if st, err := readStat(container); err == nil && !st.zombie {
		t.Errorf("the process left in the node's cgroups (pid %d) still runs", container)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead harness's directory %q is still there: %v", stale, err)
	}
	if loops := TakeSnapshot().Loops; loops[img] {
		t.Errorf("the loop device over %q is still attached", img)
	}
	t.Logf("started over a bridge, shim %d, container process %d, mount and loop device left by a dead harness", shim, container)
}

// staleContainer starts a process in the node's cgroup root, as a pod's
// container left by a dead harness is, and returns its pid.
func staleContainer(t *testing.T) int {
	t.Helper()
	if err := makeCgroupRoot(cgroupRoot(testNode)); err != nil {
		t.Fatal(err)
	}
	h := hierarchies()
	if len(h) == 0 {
		t.Fatal("no cgroup hierarchy")
	}
	cg := filepath.Join(h[0], cgroupRoot(testNode), "stale-pod")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	pid, _ := fakeDaemon(t, "sleep", nil)
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return pid
}

// checkMarked wants the kubelet and every containerd shim of the node
// (started by containerd, not by the harness) to carry this harness's
// mark: what the teardown check counts and clearLeftovers finds.
func checkMarked(t *testing.T, e *env) {
	t.Helper()
	shims, err := shimPids(e.node.ContainerdSocket)
	if err != nil || len(shims) == 0 {
		t.Fatalf("shims of %q: %v %v", e.node.ContainerdSocket, shims, err)
	}
	for _, pid := range append(shims, e.node.KubeletPID()) {
		d, ok := readDaemon(pid)
		if !ok || d.Owner.PID != os.Getpid() || d.Owner.Node != testNode {
			t.Errorf("pid %d is not marked as this harness's: %+v (marked %t)", pid, d, ok)
		}
	}
}
