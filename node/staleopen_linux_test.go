package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// startQEMU starts, in the launcher's mount namespace and pod cgroup, a
// process named qemu-kvm holding ctr/name open, as QEMU holds its disks,
// and waits until it runs under that name.
func startQEMU(t *testing.T, l *testutil.Launcher, pod, ctr, name string) int {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "qemu-kvm")
	sleep, err := os.ReadFile("/bin/sleep")
	must(t, err)
	must(t, os.WriteFile(bin, sleep, 0o755))
	out := l.Exec(t, fmt.Sprintf("echo $$ > %s/cgroup.procs && { sh -c 'exec 3<%s; exec %s infinity' </dev/null >/dev/null 2>&1 & echo $!; }",
		pod, filepath.Join(ctr, name), bin))
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	must(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == "qemu-kvm" {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never became qemu-kvm", pid)
		}
	}
}

// TestObserveStaleOpen plays harvester#11208 against the real engine: a
// block volume QEMU holds is re-published on a new device (a storage
// re-attach), the agent's verify moves the node to it, and Observe then
// reports stale-open with what QEMU holds, on every pass while QEMU holds
// the old device, and no more once QEMU is gone. Before QEMU runs, and
// while it holds the current device, the volume is not stale.
func TestObserveStaleOpen(t *testing.T) {
	n := newLinkedRoot(t)
	// The compute container's view: hotplug-disks at a path ending in
	// kubevirt/hotplug-disks, as QEMU's descriptors spell it.
	l, ctr, e := n.launcherView(t, "ctr/kubevirt/hotplug-disks")
	hotplug := filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID)))
	pod := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(launcherUID))
	ctx := context.Background()
	v := agent.DesiredVolume{Name: "blk", Mode: kubevirt.Block, LauncherUID: launcherUID,
		Source: agent.Source{AttachmentPodUID: attachUID, PVName: "pv-blk"}}
	attach := func(want outcome.Result) {
		t.Helper()
		snap, err := e.Snapshot(ctx)
		must(t, err)
		if got, err := e.Attach(ctx, snap, v); err != nil || got != want {
			t.Fatalf("attach = %s, %v; want %s", got, err, want)
		}
	}
	observe := func(what string, stale bool, why ...string) {
		t.Helper()
		snap, err := e.Snapshot(ctx)
		must(t, err)
		obs, err := e.Observe(ctx, snap, launcherUID)
		if err != nil || len(obs) != 1 {
			t.Fatalf("%s: observe = %+v, %v; want the block node", what, obs, err)
		}
		if o := obs[0]; o.StaleOpen != stale || (o.StaleWhy != "") != stale {
			t.Fatalf("%s: stale-open %v (%q), want %v", what, o.StaleOpen, o.StaleWhy, stale)
		}
		for _, w := range why {
			if !strings.Contains(obs[0].StaleWhy, w) {
				t.Errorf("%s: %q does not say %q", what, obs[0].StaleWhy, w)
			}
		}
	}

	attach(outcome.Created)
	observe("no QEMU", false)
	old := deviceOf(t, filepath.Join(hotplug, "blk"))
	qemu := startQEMU(t, l, pod, ctr, "blk")
	observe("QEMU holds the current device", false)

	// A storage re-attach: the kubelet publishes the volume on a new device.
	pub := filepath.Join(n.real, kubelet.CSIPublishFile("pv-blk", string(attachUID)))
	must(t, unix.Unmount(pub, unix.MNT_DETACH))
	loop := testutil.NewLoop(t, 16<<20)
	must(t, unix.Mount(loop.Device, pub, "", unix.MS_BIND, ""))
	attach(outcome.Replaced) // the resync's verify
	now := deviceOf(t, filepath.Join(hotplug, "blk"))
	held := fmt.Sprintf("device %d:%d", old.Major, old.Minor)
	current := fmt.Sprintf("device %d:%d", now.Major, now.Minor)
	observe("re-published under QEMU", true, fmt.Sprintf("pid %d", qemu), held, current)
	observe("still held stale", true, held)

	must(t, syscall.Kill(qemu, syscall.SIGKILL))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/fd", qemu)); err != nil || time.Now().After(deadline) {
			break
		}
	}
	observe("QEMU gone", false)
}
