// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/podcgroup"
)

const heldPod = "33333333-launcher"

// heldFixture is a launcher pod's cgroup and a hotplug-disks entry that
// processes of the pod hold open, as QEMU holds its disks.
type heldFixture struct {
	view  LauncherView
	pod   string // the pod's cgroup
	entry string // <dir>/kubevirt/hotplug-disks/vol.img
	cur   Current
}

func newHeldFixture(t *testing.T) *heldFixture {
	t.Helper()
	testutil.RequiresRoot(t)
	root := filepath.Join("/sys/fs/cgroup/devices", fmt.Sprintf("hpmount-held-test-%d", os.Getpid()))
	f := &heldFixture{pod: filepath.Join(root, "kubepods", "pod"+heldPod)}
	if err := os.MkdirAll(f.pod, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{f.pod, filepath.Dir(f.pod), root} {
			_ = unix.Rmdir(d)
		}
	})
	f.entry = filepath.Join(t.TempDir(), "kubevirt", "hotplug-disks", "vol.img")
	must(t, os.MkdirAll(filepath.Dir(f.entry), 0o755))
	must(t, os.WriteFile(f.entry, nil, 0o644))
	var st unix.Stat_t
	must(t, unix.Stat(f.entry, &st))
	f.cur = Current{File: Ident{Dev: st.Dev, Ino: st.Ino}}
	f.view = LauncherView{Proc: "/proc", Dir: "/var/run/kubevirt/hotplug-disks", CgroupRoot: root, Pods: &podcgroup.Finder{}}
	return f
}

// start runs a copy of /bin/sleep named name in the pod's cgroup, holding
// the entry open on fd 3, and returns its pid once it runs as name.
func (f *heldFixture) start(t *testing.T, name string) int {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	sleep, err := os.ReadFile("/bin/sleep")
	must(t, err)
	must(t, os.WriteFile(bin, sleep, 0o755))
	cmd := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && exec 3<%s && exec %s infinity", f.pod, f.entry, bin))
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, fmt.Sprintf("process %d running %s", cmd.Process.Pid, name), func() bool {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
		return exe == bin
	})
	return cmd.Process.Pid
}

// crowd puts n other processes into the pod's cgroup, before any started
// after it (cgroup v1 lists a cgroup's processes by pid).
func (f *heldFixture) crowd(t *testing.T, n int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && i=1 && while [ $i -lt %d ]; do sleep 1000 & i=$((i+1)); done; exec sleep 1000", f.pod, n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	waitFor(t, fmt.Sprintf("%d processes in the pod", n), func() bool {
		b, _ := os.ReadFile(filepath.Join(f.pod, "cgroup.procs"))
		return strings.Count(string(b), "\n") >= n
	})
}

// waitFor waits for what to hold; the deadline only catches a hang.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s", what)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHeldTellsQEMUByItsExecutable: a process calling itself qemu-x is
// not QEMU (its executable is not); one whose executable is qemu-kvm is,
// wherever it runs in the pod.
func TestHeldTellsQEMUByItsExecutable(t *testing.T) {
	f := newHeldFixture(t)
	fake := f.start(t, "qemu-x")
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", fake)); strings.TrimSpace(string(comm)) != "qemu-x" {
		t.Fatalf("the look-alike's command name is %q", comm)
	}
	// The look-alike holds a file under the entry's name that is not the
	// volume's: taken for QEMU, it would make the volume stale-open.
	other := f.cur
	other.File.Ino++
	if h, detail, err := f.view.Held(heldPod, "vol.img", other); err != nil || h != NoQEMU {
		t.Fatalf("Held with only a look-alike = %v (%s), %v; want NoQEMU", h, detail, err)
	}
	qemu := f.start(t, "qemu-kvm")
	h, detail, err := f.view.Held(heldPod, "vol.img", f.cur)
	if err != nil || h != Open || !strings.Contains(detail, "pid "+strconv.Itoa(qemu)) {
		t.Fatalf("Held = %v (%s), %v; want Open by pid %d", h, detail, err, qemu)
	}
}

// TestHeldFindsQEMUInACrowdedPod: QEMU behind 300 other processes of the
// pod is found; a pod with more processes than Held looks at is an
// explicit unknown, never "no QEMU".
func TestHeldFindsQEMUInACrowdedPod(t *testing.T) {
	f := newHeldFixture(t)
	f.crowd(t, 300)
	qemu := f.start(t, "qemu-kvm")
	h, detail, err := f.view.Held(heldPod, "vol.img", f.cur)
	if err != nil || h != Open || !strings.Contains(detail, "pid "+strconv.Itoa(qemu)) {
		t.Fatalf("Held = %v (%s), %v; want Open by pid %d behind 300 processes", h, detail, err, qemu)
	}
	cgs, err := f.view.Pods.Find(f.view.CgroupRoot, heldPod)
	must(t, err)
	if pids, more, err := podcgroup.Procs(cgs, 300); err != nil || !more || len(pids) != 300 {
		t.Fatalf("Procs of 301 processes bounded at 300 = %d pids, more %v, %v; want 300 and more", len(pids), more, err)
	}
	if pids, more, err := podcgroup.Procs(cgs, 301); err != nil || more || len(pids) != 301 || pids[300] != qemu {
		t.Fatalf("Procs of 301 processes bounded at 301 = %v, more %v, %v; want all, QEMU last", pids, more, err)
	}
}
