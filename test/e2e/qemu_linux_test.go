// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/qemu"
	"github.com/hpmount/hpmount/test/simnode"
)

// TestQEMU is issue 21: a real QEMU in each launcher (its mount namespace,
// uid/gid 107, the compute container's device cgroup) opens every volume
// the agent hotplugs as virt-launcher's libvirt does, and every assertion
// is on QEMU's own answer (QMP, HMP qemu-io), checked against the PVC's
// device on the host.
func TestQEMU(t *testing.T) {
	e := newEnv(t, "--grow-filesystems")
	v := e.newVM("tenant-q", "qemu-a")
	ext := v.addVolume("ext", "ext4", 64<<20)
	xfs := v.addVolume("xfs", "xfs", 320<<20)
	raw := v.addVolume("raw", "", 32<<20)
	hp1 := v.newAttachmentPod(ext, xfs, raw)
	v.apply()
	q := v.startQEMU()
	mountIDs := map[string]int{}

	if !e.step("1 hotplug ext4, xfs and block: QEMU opens them as uid 107", func(t *testing.T) {
		mountIDs["ext"], mountIDs["xfs"] = v.waitMounted(ext), v.waitMounted(xfs)
		v.waitNode(raw)
		// disk.img at the size KubeVirt gives a 320 MiB claim: the
		// filesystem's room, so a claim expansion alone cannot enlarge it.
		v.setDiskImage(t, xfs, 320<<20)
		for i, vol := range []simnode.Volume{ext, xfs, raw} {
			v.plug(t, q, vol, "rp"+strconv.Itoa(i+1))
			v.qemuRoundTrip(t, q, vol, 0x5a, 1<<20)
		}
	}) {
		return
	}

	later := v.addVolume("later", "ext4", 64<<20)
	e.step("3 attachment pod replaced: QEMU keeps its I/O, no remount", func(t *testing.T) {
		v.replaceAttachmentPod(hp1, []simnode.Volume{ext, xfs, raw}, later)
		v.apply()
		v.waitMounted(later)
		for _, vol := range []simnode.Volume{ext, xfs} {
			if id := v.waitMounted(vol); id != mountIDs[vol.Name] {
				t.Fatalf("%s remounted after the replacement: mount %d, was %d", vol.Name, id, mountIDs[vol.Name])
			}
		}
		for _, vol := range []simnode.Volume{ext, xfs, raw} {
			if err := q.ReadPattern(e.ctx, disk(vol), 0x5a, 1<<20, 1<<20); err != nil {
				t.Fatalf("QEMU lost what it wrote before the replacement: %v", err)
			}
			v.qemuRoundTrip(t, q, vol, 0x3c, 4<<20)
		}
		v.plug(t, q, later, "rp4")
		v.qemuRoundTrip(t, q, later, 0x77, 1<<20)
	})

	e.step("4 resize after the replacement: the agent grows xfs, QEMU sees the new size", func(t *testing.T) {
		v.resizeXFS(t, q, xfs, 480<<20)
	})

	e.step("4 a disk.img beyond its filesystem's room: QEMU's write gets ENOSPC", func(t *testing.T) {
		v.fillFilesystem(t, later, func() {
			err := q.WritePattern(e.ctx, disk(later), 0x99, 8<<20, 1<<20)
			if err == nil || !strings.Contains(err.Error(), "No space left on device") {
				t.Fatalf("QEMU's write into disk.img on a full filesystem: %v, want ENOSPC", err)
			}
			t.Logf("QEMU on a full filesystem: %v", err)
		})
		v.qemuRoundTrip(t, q, later, 0x99, 8<<20)
	})

	e.step("6 unplug: device_del and blockdev-del, then the agent unmounts", func(t *testing.T) {
		if err := q.DeviceDel(e.ctx, disk(ext)); err != nil {
			t.Fatal(err)
		}
		if err := q.BlockdevDel(e.ctx, ext.Name); err != nil {
			t.Fatal(err)
		}
		v.RemoveVolume(ext.Name)
		v.apply()
		v.waitGone(ext)
		e.waitEvent(v.NS, v.Name, "VolumeUnmounted", "ext")
		if _, err := q.DeviceSize(e.ctx, disk(ext)); err == nil {
			t.Fatal("query-block still lists the unplugged disk")
		}
	})

	e.step("6 detach under QEMU's open disks: its I/O goes on, reported once", func(t *testing.T) {
		v.RemoveVolume(xfs.Name)
		v.RemoveVolume(raw.Name)
		v.apply()
		v.waitGone(xfs)
		v.waitGone(raw)
		for _, vol := range []simnode.Volume{xfs, raw} {
			v.qemuRoundTrip(t, q, vol, 0x11, 2<<20)
		}
		e.assertReportedOnce(t, v, "VolumeUnmounted", xfs.Name, raw.Name)
	})
}

// TestQEMUBlockRules: QEMU's open of a block volume is refused (EPERM) by
// the compute container's device cgroup until the agent grants the rule;
// after systemd reapplies the unit and drops the rule (kubevirt#14825),
// QEMU's open descriptor keeps working, a new open fails until the
// agent's resync restores the rule.
func TestQEMUBlockRules(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-q", "qemu-b")
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(raw)
	v.apply()
	v.waitNode(raw)
	var q *qemu.QEMU

	if !e.step("2 EPERM before the rule, works after it", func(t *testing.T) {
		// A compute restart is the one moment the agent cannot have
		// granted the rule yet: the new container's cgroup has the
		// runtime's defaults until the pod status names it.
		if err := v.L.RestartCompute(); err != nil {
			t.Fatal(err)
		}
		q = v.startQEMU()
		err := q.BlockdevAdd(e.ctx, raw.Name, v.qemuFile(raw))
		if err == nil || !strings.Contains(err.Error(), "Operation not permitted") {
			t.Fatalf("blockdev-add before the rule: %v, want EPERM", err)
		}
		t.Logf("before the rule QEMU answered: %v", err)
		if _, err := e.ctrl.SetComputeRestarts(e.ctx, v.Launcher, v.L.Restarts); err != nil {
			t.Fatal(err)
		}
		e.eventually("QEMU's blockdev-add after the grant", 30*time.Second, func() error {
			return q.BlockdevAdd(e.ctx, raw.Name, v.qemuFile(raw))
		})
		if err := q.DeviceAdd(e.ctx, disk(raw), raw.Name, "rp1"); err != nil {
			t.Fatal(err)
		}
		v.qemuRoundTrip(t, q, raw, 0x5a, 1<<20)
	}) {
		return
	}

	e.step("2 rule dropped by a unit reapply: old descriptor works, new open waits for the resync", func(t *testing.T) {
		// Stop the agent so that its resync cannot repair the rule
		// before QEMU's new open is refused.
		stopAgent(t, e)
		dropBlockRules(t, v.L.Cgroup)
		v.qemuRoundTrip(t, q, raw, 0x21, 2<<20)
		err := q.BlockdevAdd(e.ctx, "raw-again", v.qemuFile(raw))
		if err == nil || !strings.Contains(err.Error(), "Operation not permitted") {
			t.Fatalf("new open after the rule was dropped: %v, want EPERM", err)
		}
		t.Logf("new open without the rule: %v", err)
		contAgent(t, e)
		e.eventually("the resync restores the rule for a new open", 30*time.Second, func() error {
			return q.BlockdevAdd(e.ctx, "raw-again", v.qemuFile(raw))
		})
		v.qemuRoundTrip(t, q, raw, 0x22, 3<<20)
	})
}

// startQEMU starts a QEMU as the VM's launcher's. It is killed when the
// test ends.
func (v *vm) startQEMU() *qemu.QEMU { return v.e.launcherQEMU(v.L, qemu.Options{}) }

// launcherQEMU starts a QEMU as l's: in its mount namespace, as 107:107,
// in its compute container's device cgroup, with o's other options.
func (e *env) launcherQEMU(l *simnode.Launcher, o qemu.Options) *qemu.QEMU {
	e.t.Helper()
	o.MountNamespaceOf, o.UID, o.GID, o.Cgroups = l.Pid, 107, 107, []string{l.Cgroup}
	q, err := qemu.Start(e.ctx, o)
	e.must(err)
	root := e.root
	root.Cleanup(func() {
		q.Kill()
		if root.Failed() {
			root.Logf("qemu %d stderr: %s", q.Pid, q.Stderr())
		}
	})
	return q
}

// disk is the QEMU device id of a volume.
func disk(vol simnode.Volume) string { return "disk-" + vol.Name }

// qemuFile is what virt-launcher's libvirt opens for vol: the launcher's
// path, with KubeVirt's default cache mode (SetDriverCacheMode: "none",
// i.e. O_DIRECT, when the file or device accepts O_DIRECT, else
// "writethrough") and io mode (SetOptimalIOMode: "native" with O_DIRECT on
// a block device or a preallocated image; a sparse disk.img keeps QEMU's
// default, threads).
func (v *vm) qemuFile(vol simnode.Volume) qemu.File {
	return launcherFile(v.L, v.Target(vol), vol.Block)
}

// launcherFile is qemuFile for the entry at target (a host path) in l's
// hotplug-disks.
func launcherFile(l *simnode.Launcher, target string, block bool) qemu.File {
	f := qemu.File{Path: l.ContainerPath(filepath.Base(target)), Block: block, Direct: acceptsDirectIO(target)}
	if f.Block && f.Direct {
		f.AIO = "native"
	}
	return f
}

func acceptsDirectIO(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// plug is virt-launcher's hotplug of vol: blockdev-add, then device_add on
// port.
func (v *vm) plug(t *testing.T, q *qemu.QEMU, vol simnode.Volume, port string) {
	t.Helper()
	plugFile(t, v.e, q, vol, v.qemuFile(vol), port)
}

func plugFile(t *testing.T, e *env, q *qemu.QEMU, vol simnode.Volume, f qemu.File, port string) {
	t.Helper()
	if !f.Direct {
		t.Fatalf("%s does not accept O_DIRECT: KubeVirt would use writethrough", f.Path)
	}
	if err := q.BlockdevAdd(e.ctx, vol.Name, f); err != nil {
		t.Fatalf("blockdev-add of %s as uid 107: %v", vol.Name, err)
	}
	if err := q.DeviceAdd(e.ctx, disk(vol), vol.Name, port); err != nil {
		t.Fatal(err)
	}
}

// qemuRoundTrip has QEMU write 1 MiB of pattern at off through its block
// layer and read it back verified, then reads the same bytes from the
// volume's own source on the host (the raw device, or disk.img through a
// second mount of the device).
func (v *vm) qemuRoundTrip(t *testing.T, q *qemu.QEMU, vol simnode.Volume, pattern byte, off int64) {
	t.Helper()
	const n = 1 << 20
	if err := q.WritePattern(v.e.ctx, disk(vol), pattern, off, n); err != nil {
		t.Fatal(err)
	}
	if err := q.ReadPattern(v.e.ctx, disk(vol), pattern, off, n); err != nil {
		t.Fatal(err)
	}
	got, where, err := harness.ReadSource(v.Disks[vol.Name], vol.Block, off, n)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(bytes.Repeat([]byte{pattern}, n)) {
		t.Fatalf("%s: %s does not hold QEMU's %#x at %d", vol.Name, where, pattern, off)
	}
}

// kubevirtImageSize is KubeVirt's size of disk.img for a claim of
// capacity, from what the filesystem holding it reports now.
func (v *vm) kubevirtImageSize(t *testing.T, vol simnode.Volume, capacity int64) (want, now int64) {
	t.Helper()
	var sfs unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Statfs(v.Target(vol), &sfs); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(v.Target(vol), &st); err != nil {
		t.Fatal(err)
	}
	want, err := mount.DiskImageSize(capacity, 0.055, int64(sfs.Bavail)*sfs.Bsize, st.Blocks*512)
	if err != nil {
		t.Fatal(err)
	}
	return want, st.Size
}

// setDiskImage extends disk.img to KubeVirt's size for capacity, as
// virt-launcher does; it never shrinks it.
func (v *vm) setDiskImage(t *testing.T, vol simnode.Volume, capacity int64) int64 {
	t.Helper()
	want, now := v.kubevirtImageSize(t, vol, capacity)
	if want > now {
		if err := os.Truncate(v.Target(vol), want); err != nil {
			t.Fatal(err)
		}
		return want
	}
	return now
}

// fillFilesystem takes all but 64 KiB of the room left on vol's
// filesystem with a file beside disk.img (through a second mount of its
// device, which shares the launcher's superblock), runs f, and frees it.
func (v *vm) fillFilesystem(t *testing.T, vol simnode.Volume, f func()) {
	t.Helper()
	d := v.Disks[vol.Name]
	dir := t.TempDir()
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		t.Fatalf("mount %s: %v", d.Device, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filler.Name())
	defer filler.Close()
	if err := unix.Fallocate(int(filler.Fd()), 0, 0, int64(sfs.Bavail)*sfs.Bsize-64<<10); err != nil {
		t.Fatalf("fill %s: %v", vol.Name, err)
	}
	f()
}

// resizeXFS is seed 004 seen from QEMU: the storage grows, the agent grows
// the filesystem through the launcher's bind, then the test plays
// virt-launcher: disk.img extended by KubeVirt's rule and block_resize.
func (v *vm) resizeXFS(t *testing.T, q *qemu.QEMU, vol simnode.Volume, size int64) {
	t.Helper()
	e := v.e
	before, err := q.DeviceSize(e.ctx, disk(vol))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Disks[vol.Name].Grow(size); err != nil {
		t.Fatal(err)
	}
	// Before the agent grows the filesystem, KubeVirt's rule gives no
	// larger disk.img: the filesystem has no room for one.
	if want, now := v.kubevirtImageSize(t, vol, size); want > now {
		t.Fatalf("without growth KubeVirt's rule already gives %d bytes, disk.img has %d", want, now)
	}
	v.SetRequest(vol.Name, size)
	v.apply()
	e.waitEvent(v.NS, v.Name, "FilesystemExpanded", vol.Name+": filesystem xfs grew")
	grown := v.setDiskImage(t, vol, size)
	if grown <= before {
		t.Fatalf("after the growth KubeVirt's rule gives %d bytes, QEMU had %d", grown, before)
	}
	if err := q.BlockResize(e.ctx, vol.Name, grown); err != nil {
		t.Fatal(err)
	}
	got, err := q.DeviceSize(e.ctx, disk(vol))
	if err != nil || got != grown {
		t.Fatalf("query-block after block_resize: %d bytes (%v), want %d", got, err, grown)
	}
	t.Logf("query-block: %s went from %d to %d bytes", disk(vol), before, got)
	v.qemuRoundTrip(t, q, vol, 0x4d, grown-(1<<20))
}

// assertReportedOnce waits for two more resync passes over every VMI and
// checks that each volume got exactly one reason Event and that the agent
// made no further detach calls: the detach was done and reported, not
// retried.
func (e *env) assertReportedOnce(t *testing.T, v *vm, reason string, vols ...string) {
	t.Helper()
	for _, name := range vols {
		e.waitEvent(v.NS, v.Name, reason, name)
	}
	detaches := func() float64 {
		text, err := e.agent.Scrape()
		e.must(err)
		ops, err := harness.Counters(text, "hpmount_mount_operations_total")
		e.must(err)
		var n float64
		for labels, c := range ops {
			if strings.Contains(labels, `op="detach"`) {
				n += c
			}
		}
		return n
	}
	before, passes := detaches(), e.reconciles()
	e.eventually("two resyncs", 60*time.Second, func() error {
		if n := e.reconciles(); n < passes+2 {
			return fmt.Errorf("%v reconciles since, want 2", n-passes)
		}
		return nil
	})
	if after := detaches(); after != before {
		t.Fatalf("the agent made %v more detach calls after the volumes were gone", after-before)
	}
	for _, name := range vols {
		n := 0
		for _, ev := range e.events(v.NS, v.Name) {
			if ev.Reason == reason && strings.Contains(ev.Message, name) {
				n += int(max(ev.Count, 1))
			}
		}
		if n != 1 {
			t.Fatalf("%d %s events for %s, want 1", n, reason, name)
		}
	}
}

// reconciles is the agent's count of finished reconciles.
func (e *env) reconciles() float64 {
	e.t.Helper()
	text, err := e.agent.Scrape()
	e.must(err)
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "hpmount_reconcile_duration_seconds_count "); ok {
			n, err := strconv.ParseFloat(rest, 64)
			e.must(err)
			return n
		}
	}
	e.t.Fatal("no hpmount_reconcile_duration_seconds_count in the scrape")
	return 0
}

// dropBlockRules is what systemd does to a v1 device cgroup when it
// reapplies the unit (kubevirt#14825): everything denied, then only the
// unit's own rules (the runtime's char devices) allowed again.
func dropBlockRules(t *testing.T, cgroup string) {
	t.Helper()
	for _, w := range [][2]string{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"}, {"devices.allow", "c 1:5 rwm"},
		{"devices.allow", "c 1:9 rwm"}, {"devices.allow", "c 136:* rwm"}} {
		if err := os.WriteFile(filepath.Join(cgroup, w[0]), []byte(w[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func stopAgent(t *testing.T, e *env) {
	t.Helper()
	if err := e.agent.Cmd.Process.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.agent.Cmd.Process.Signal(unix.SIGCONT) })
	// The signal is delivered when each thread next leaves the kernel: a
	// write to a cgroup in flight could still land. Wait until every
	// thread is stopped.
	e.eventually("agent stopped", 30*time.Second, func() error {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", e.agent.Pid()))
		if err != nil {
			return err
		}
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				return err
			}
			if _, rest, _ := strings.Cut(string(b), ") "); !strings.HasPrefix(rest, "T") {
				return fmt.Errorf("%s: state %.1s", task, rest)
			}
		}
		return nil
	})
}

func contAgent(t *testing.T, e *env) {
	t.Helper()
	if err := e.agent.Cmd.Process.Signal(unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
