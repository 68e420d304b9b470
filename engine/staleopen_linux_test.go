// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

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

	"github.com/hpmount/hpmount/hotplug"
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

// staleCheck attaches v and observes its launcher through e, as the
// agent's resync does, for the stale-open tests; l is a launcher-like
// process mounting hotplug-disks at ctr, a path ending in
// kubevirt/hotplug-disks as QEMU's descriptors spell it, in the pod
// cgroup pod; hotplug is the host's hotplug-disks.
type staleCheck struct {
	t                 *testing.T
	e                 *Engine
	v                 hotplug.DesiredVolume
	l                 *testutil.Launcher
	ctr, pod, hotplug string
}

func (n *linkedRoot) staleCheck(t *testing.T, name string, mode kubevirt.VolumeMode, pv string) staleCheck {
	l, ctr, e := n.launcherView(t, "ctr/kubevirt/hotplug-disks")
	return staleCheck{t: t, e: e, l: l, ctr: ctr,
		v: hotplug.DesiredVolume{Name: name, Mode: mode, LauncherUID: launcherUID, ComputeContainerID: "containerd://" + computeID,
			Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: pv}},
		pod:     filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(launcherUID)),
		hotplug: filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID)))}
}

func (c staleCheck) attach(want outcome.Result) {
	c.t.Helper()
	ctx := context.Background()
	snap, err := c.e.Snapshot(ctx)
	must(c.t, err)
	if got, err := c.e.Attach(ctx, snap, c.v); err != nil || got != want {
		c.t.Fatalf("attach = %s, %v; want %s", got, err, want)
	}
}

// observe checks that the volume is (not) stale-open and that the reason
// says each of why.
func (c staleCheck) observe(what string, stale bool, why ...string) {
	c.t.Helper()
	ctx := context.Background()
	snap, err := c.e.Snapshot(ctx)
	must(c.t, err)
	obs, err := c.e.Observe(ctx, snap, launcherUID)
	if err != nil || len(obs) != 1 {
		c.t.Fatalf("%s: observe = %+v, %v; want the one volume", what, obs, err)
	}
	if o := obs[0]; o.StaleOpen != stale || (o.StaleWhy != "") != stale {
		c.t.Fatalf("%s: stale-open %v (%q), want %v", what, o.StaleOpen, o.StaleWhy, stale)
	}
	for _, w := range why {
		if !strings.Contains(obs[0].StaleWhy, w) {
			c.t.Errorf("%s: %q does not say %q", what, obs[0].StaleWhy, w)
		}
	}
}

// stopQEMU kills pid and waits until its descriptors are gone.
func stopQEMU(t *testing.T, pid int) {
	t.Helper()
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/fd", pid)); err != nil || time.Now().After(deadline) {
			return
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
	c := n.staleCheck(t, "blk", kubevirt.Block, "pv-blk")
	c.attach(outcome.Created)
	c.observe("no QEMU", false)
	old := deviceOf(t, filepath.Join(c.hotplug, "blk"))
	qemu := startQEMU(t, c.l, c.pod, c.ctr, "blk")
	c.observe("QEMU holds the current device", false)

	// A storage re-attach: the kubelet publishes the volume on a new device.
	pub := filepath.Join(n.real, kubelet.CSIPublishFile("pv-blk", string(attachUID)))
	must(t, unix.Unmount(pub, unix.MNT_DETACH))
	loop := testutil.NewLoop(t, 16<<20)
	must(t, unix.Mount(loop.Device, pub, "", unix.MS_BIND, ""))
	c.attach(outcome.Replaced) // the resync's verify
	now := deviceOf(t, filepath.Join(c.hotplug, "blk"))
	held := fmt.Sprintf("device %d:%d", old.Major, old.Minor)
	current := fmt.Sprintf("device %d:%d", now.Major, now.Minor)
	c.observe("re-published under QEMU", true, fmt.Sprintf("pid %d", qemu), held, current)
	c.observe("still held stale", true, held)

	stopQEMU(t, qemu)
	c.observe("QEMU gone", false)
}

// TestObserveStaleOpenFile is TestObserveStaleOpen for a filesystem
// volume: re-published on a new device, its bind is replaced, which
// detaches the launcher's old bind under QEMU's descriptor (whose link
// then reads "/"). The descriptor is still told the volume's by the
// launcher's former bind (its mount and disk.img), and Observe reports
// stale-open. A QEMU holding an unrelated file on another detached bind is
// not stale.
func TestObserveStaleOpenFile(t *testing.T) {
	n := newLinkedRoot(t)
	c := n.staleCheck(t, "fs", kubevirt.Filesystem, "pv-fs")
	c.attach(outcome.Mounted)
	c.observe("no QEMU", false)
	unrelated := heldOnDetachedBind(t, c.l, c.pod, c.ctr)
	c.observe("QEMU holds an unrelated file on a detached bind", false)
	stopQEMU(t, unrelated)

	old := identOf(t, filepath.Join(c.hotplug, "fs.img"))
	qemu := startQEMU(t, c.l, c.pod, c.ctr, "fs.img")
	c.observe("QEMU holds the current disk.img", false)

	// A storage re-attach: the kubelet publishes the volume's filesystem
	// on a new device, and the resync's verify replaces the dead bind.
	mnt := filepath.Join(n.real, kubelet.VolumesDir(string(attachUID)), "kubernetes.io~csi", "pv-fs", "mount")
	must(t, unix.Unmount(mnt, unix.MNT_DETACH))
	testutil.NewFilesystem(t, "ext4", 32<<20, mnt)
	must(t, os.WriteFile(filepath.Join(mnt, "disk.img"), make([]byte, 1<<20), 0o644))
	c.attach(outcome.Replaced)
	now := identOf(t, filepath.Join(c.hotplug, "fs.img"))
	if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", qemu)); err != nil || link != "/" {
		t.Fatalf("QEMU's descriptor of the replaced bind reads %q, %v; want \"/\" (a detached mount's root)", link, err)
	}
	c.observe("re-published under QEMU", true, fmt.Sprintf("pid %d", qemu), "former disk.img "+old, "now "+now)
	c.observe("still held stale", true, old)

	stopQEMU(t, qemu)
	c.observe("QEMU gone", false)
}

// heldOnDetachedBind starts a qemu-kvm process in the launcher holding a
// file bound beside hotplug-disks, then detaches that bind: a descriptor
// that reads "/" as a replaced bind's does, but is no volume's.
func heldOnDetachedBind(t *testing.T, l *testutil.Launcher, pod, ctr string) int {
	t.Helper()
	file := filepath.Join(t.TempDir(), "unrelated.img")
	must(t, os.WriteFile(file, make([]byte, 4096), 0o644))
	target := filepath.Join(filepath.Dir(ctr), "unrelated.img")
	l.Exec(t, fmt.Sprintf("touch %s && mount --bind %s %s", target, file, target))
	pid := startQEMU(t, l, pod, filepath.Dir(ctr), "unrelated.img")
	l.Exec(t, "umount -l "+target)
	return pid
}

func identOf(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(path, &st))
	return fmt.Sprintf("%d:%d inode %d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}
