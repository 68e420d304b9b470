// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/mountwatch"
	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/podcgroup"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

const (
	launcherUID = types.UID("11111111-launcher")
	attachUID   = types.UID("22222222-attach")
	// computeID is the launcher's compute container; its cgroup is
	// <pod cgroup>/<computeID>, as containerd names it with cgroupfs.
	computeID = "c0ffee0000000000000000000000000000000000000000000000000000000001"
)

// linkedRoot is a node whose kubelet root is configured as a symlink
// (/var/lib/kubelet -> /data/kubelet), with one filesystem and one block
// volume published for the attachment pod the way the kubelet spells them.
type linkedRoot struct {
	real, configured string
	cgroupRoot       string
}

func newLinkedRoot(t *testing.T) *linkedRoot {
	testutil.RequiresRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	n := &linkedRoot{real: filepath.Join(dir, "data", "kubelet"), configured: filepath.Join(dir, "var-lib-kubelet")}
	must(t, os.MkdirAll(filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID))), 0o755))
	must(t, os.Symlink(n.real, n.configured))

	mnt := filepath.Join(n.real, kubelet.VolumesDir(string(attachUID)), "kubernetes.io~csi", "pv-fs", "mount")
	testutil.NewFilesystem(t, "ext4", 32<<20, mnt)
	must(t, os.WriteFile(filepath.Join(mnt, "disk.img"), make([]byte, 1<<20), 0o644))

	loop := testutil.NewLoop(t, 16<<20)
	pub := filepath.Join(n.real, kubelet.CSIPublishFile("pv-blk", string(attachUID)))
	must(t, os.MkdirAll(filepath.Dir(pub), 0o750))
	must(t, os.WriteFile(pub, nil, 0o600))
	must(t, unix.Mount(loop.Device, pub, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pub, unix.MNT_DETACH) })
	devices := filepath.Join(n.real, kubelet.VolumeDevicesDir(string(attachUID)), "kubernetes.io~csi")
	must(t, os.MkdirAll(devices, 0o750))
	// The kubelet writes the link with the root as configured.
	must(t, os.Symlink(filepath.Join(n.configured, kubelet.CSIPublishFile("pv-blk", string(attachUID))), filepath.Join(devices, "pv-blk")))

	n.cgroupRoot = filepath.Join("/sys/fs/cgroup/devices", fmt.Sprintf("hpmount-node-test-%d", os.Getpid()))
	pod := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(launcherUID))
	must(t, os.MkdirAll(filepath.Join(pod, computeID), 0o755))
	t.Cleanup(func() {
		for _, d := range []string{filepath.Join(pod, computeID), pod, filepath.Dir(pod), n.cgroupRoot} {
			_ = unix.Rmdir(d)
		}
	})
	return n
}

// engine is an engine on the linked root with its v1 device cgroups,
// closed when the test ends.
func (n *linkedRoot) engine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: n.configured,
		CgroupRoot: n.cgroupRoot, CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107})
	must(t, err)
	t.Cleanup(e.Close)
	return e
}

// launcherView starts a launcher-like process in the launcher's pod cgroup
// that mounts hotplug-disks at rel below the test's directory, as the
// compute container does, and an engine that asks it there.
func (n *linkedRoot) launcherView(t *testing.T, rel string) (*testutil.Launcher, string, *Engine) {
	t.Helper()
	hotplug := filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID)))
	testutil.MakeShared(t, filepath.Dir(n.real))
	ctr := filepath.Join(filepath.Dir(n.real), rel)
	must(t, os.MkdirAll(ctr, 0o755))
	l := testutil.StartLauncher(t)
	pod := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(launcherUID))
	must(t, os.WriteFile(filepath.Join(pod, "cgroup.procs"), []byte(fmt.Sprint(l.Pid)), 0))
	l.Exec(t, "mount --bind "+hotplug+" "+ctr)
	e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: n.configured,
		CgroupRoot: n.cgroupRoot, CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev",
		LauncherDir: ctr, UID: 107, GID: 107})
	must(t, err)
	t.Cleanup(e.Close)
	return l, ctr, e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestEngineUnderALinkedKubeletRoot attaches, observes and detaches a
// filesystem and a block volume through the real engine when the kubelet
// root is a symlink: no false unsafe-content refusal for either.
func TestEngineUnderALinkedKubeletRoot(t *testing.T) {
	n := newLinkedRoot(t)
	e := n.engine(t)
	if got := e.KubeletRoot(); got.Path != n.real || got.Configured != n.configured {
		t.Fatalf("kubelet root = %+v, want %q resolved from %q", got, n.real, n.configured)
	}
	ctx := context.Background()
	vols := []hotplug.DesiredVolume{
		{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID, Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}},
		{Name: "blk", Mode: kubevirt.Block, LauncherUID: launcherUID, ComputeContainerID: "containerd://" + computeID,
			Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-blk"}},
	}
	for pass, want := range []map[string]outcome.Result{
		{"fs": outcome.Mounted, "blk": outcome.Created},
		{"fs": outcome.Unchanged, "blk": outcome.Unchanged},
	} {
		snap, err := e.Snapshot(ctx)
		must(t, err)
		for _, v := range vols {
			if got, err := e.Attach(ctx, snap, v); err != nil || got != want[v.Name] {
				t.Fatalf("pass %d: attach %s = %s, %v; want %s", pass+1, v.Name, got, err, want[v.Name])
			}
		}
	}
	snap, err := e.Snapshot(ctx)
	must(t, err)
	observed, err := e.Observe(ctx, snap, launcherUID)
	must(t, err)
	if len(observed) != 2 {
		t.Fatalf("observed %+v, want the bind and the node", observed)
	}
	for _, o := range observed {
		if !o.Healthy(o.Mode) {
			t.Errorf("observed %+v is not healthy", o)
		}
		if got, err := e.Detach(ctx, snap, launcherUID, o); err != nil || got != outcome.Removed {
			t.Errorf("detach %s = %s, %v; want removed", o.Name, got, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID))))
	if err != nil || len(entries) != 0 {
		t.Fatalf("hotplug-disks after detach: %v, %v; want empty", entries, err)
	}
	// An observe of the emptied launcher drops what the memos kept of it.
	k, seen := growKey{launcherUID, "fs"}, entryKey{mountID: 1, source: "7:0 /disk.img"}
	e.sight.put(k, seen)
	snap, err = e.Snapshot(ctx)
	must(t, err)
	if observed, err := e.Observe(ctx, snap, launcherUID); err != nil || len(observed) != 0 {
		t.Fatalf("observe after detach = %+v, %v; want nothing", observed, err)
	}
	if e.sight.has(k, seen) {
		t.Error("the memos still hold a launcher whose hotplug-disks is empty")
	}
}

// TestGrowLeavesAPublishedVolumeToTheKubelet: while the attachment pod
// still publishes a volume, CSI NodeExpandVolume grows its filesystem and a
// second resizer would only race it (ext4 EBUSY, xfs EAGAIN, a false
// FilesystemExpansionFailed). Once the volume is no longer published, which
// is when no NodeExpandVolume will ever run for it again, the engine grows
// it.
func TestGrowLeavesAPublishedVolumeToTheKubelet(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	root := filepath.Join(dir, "kubelet")
	must(t, os.MkdirAll(filepath.Join(root, kubelet.HotplugDisksDir(string(launcherUID))), 0o755))
	// Growth makes its private directory a mount of its own.
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(dir, "grow"), unix.MNT_DETACH) })
	mnt := filepath.Join(root, kubelet.VolumesDir(string(attachUID)), "kubernetes.io~csi", "pv-fs", "mount")
	loop := testutil.NewFilesystem(t, "xfs", testutil.MinXFSSize, mnt)
	must(t, os.WriteFile(filepath.Join(mnt, "disk.img"), make([]byte, 1<<20), 0o644))
	e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: root,
		CgroupRoot: "/sys/fs/cgroup", CgroupMode: blockdev.CgroupAuto, SysRoot: "/sys", DevRoot: "/dev",
		PrivateDir: filepath.Join(dir, "grow"), UID: 107, GID: 107, Grow: GrowPolicy{Filesystems: true}})
	must(t, err)
	defer e.Close()
	ctx := context.Background()
	v := hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID,
		Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}}
	snap, err := e.Snapshot(ctx)
	must(t, err)
	if _, err := e.Attach(ctx, snap, v); err != nil {
		t.Fatal(err)
	}
	// Two checks with nothing to grow: the second is answered from the
	// memo, which the device's growth below must invalidate.
	var first hotplug.GrowResult
	for i := range 2 {
		snap, err = e.Snapshot(ctx)
		must(t, err)
		r, err := e.Grow(ctx, snap, v)
		if err != nil || r.Grown || r.DeviceBytes != testutil.MinXFSSize {
			t.Fatalf("check %d before the device grew = %+v, %v", i+1, r, err)
		}
		if i == 0 {
			first = r
		} else if r.FilesystemAfter != first.FilesystemAfter || r.DeviceBytes != first.DeviceBytes {
			t.Fatalf("remembered check = %+v, want the sizes of %+v", r, first)
		}
	}
	loop.Grow(t, testutil.MinXFSSize+200<<20)

	snap, err = e.Snapshot(ctx)
	must(t, err)
	r, err := e.Grow(ctx, snap, v)
	if err != nil || r.Grown || r.FilesystemAfter != r.FilesystemBefore || r.DeviceBytes != testutil.MinXFSSize+200<<20 {
		t.Fatalf("grow while published = %+v, %v; want a measurement of the grown device only", r, err)
	}
	// The attachment pod was replaced: the kubelet unpublished the volume;
	// the launcher's bind keeps the filesystem.
	must(t, unix.Unmount(mnt, unix.MNT_DETACH))
	must(t, os.Remove(mnt))
	snap, err = e.Snapshot(ctx)
	must(t, err)
	r, err = e.Grow(ctx, snap, v)
	if err != nil || !r.Grown || r.FilesystemAfter <= r.FilesystemBefore {
		t.Fatalf("grow once unpublished = %+v, %v; want the filesystem grown", r, err)
	}
	o, err := e.Observe(ctx, snap, launcherUID)
	must(t, err)
	for _, ov := range o {
		_, _ = e.Detach(ctx, snap, launcherUID, ov)
	}
}

// TestStuckCallIsAbandoned: a volume on a frozen filesystem blocks the
// attach in the kernel (giving the bound disk.img to QEMU waits for the
// thaw, as a frozen or dead storage backend would). The call is abandoned
// at its deadline and reported as hotplug.ErrStuck, another launcher's attach
// goes on, and the liveness check passes even once the stuck call outlives
// its limit: its thread sleeps uninterruptibly, so a restart would not end
// it (TestLivenessOnlyWhenARestartHelps). (The frozen filesystem is the
// volume's: one mounted on hotplug-disks is refused before any write.)
func TestStuckCallIsAbandoned(t *testing.T) {
	n := newLinkedRoot(t)
	frozenDir, frozen := n.frozenVolume(t)
	e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: n.configured,
		CgroupRoot: n.cgroupRoot, CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107,
		CallTimeout: 300 * time.Millisecond})
	must(t, err)
	defer e.Close()
	testutil.Run(t, "fsfreeze", "--freeze", frozenDir)
	thawed := false
	thaw := func() {
		if !thawed {
			testutil.Run(t, "fsfreeze", "--unfreeze", frozenDir)
			thawed = true
		}
	}
	t.Cleanup(thaw)

	ctx := context.Background()
	snap, err := e.Snapshot(ctx)
	must(t, err)
	start := time.Now()
	if _, err := e.Attach(ctx, snap, frozen); !errors.Is(err, hotplug.ErrStuck) {
		t.Fatalf("attach into a frozen filesystem = %v, want hotplug.ErrStuck", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the stuck attach took %s to be abandoned", took)
	}
	ok := hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID,
		Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}}
	if got, err := e.Attach(ctx, snap, ok); err != nil || got != outcome.Mounted {
		t.Fatalf("attach of another launcher meanwhile = %s, %v; want mounted", got, err)
	}
	// Asked again while the first call hangs: refused at once, and no
	// second thread is spent on the volume.
	if _, err := e.Attach(ctx, snap, frozen); !errors.Is(err, hotplug.ErrStuck) || e.calls.held() != 1 {
		t.Fatalf("attach again while the first hangs = %v with %d threads held; want hotplug.ErrStuck and 1", err, e.calls.held())
	}
	if got := e.StuckThreads(); got != 1 {
		t.Fatalf("StuckThreads = %d, want 1", got)
	}
	// The stuck thread waits on the frozen filesystem where no signal
	// reaches it: a restart would not end it, so liveness passes.
	const limit = 200 * time.Millisecond
	hung := hungRunner(t, e.calls, frozen.LauncherUID, "fs", "attach")
	waitStuckPast(t, hung, limit, 'D')
	if err := e.Liveness(limit)(); err != nil {
		t.Fatalf("liveness fails for a call in uninterruptible sleep: %v", err)
	}
	thaw()
	waitUnstuck(t, hung)
	waitHeld(t, e.calls, 0)
	detachAll(t, e, launcherUID, frozen.LauncherUID)
}

// frozenVolume publishes an ext4 volume for another launcher, to be
// frozen by the test, and returns its mount and the volume.
func (n *linkedRoot) frozenVolume(t *testing.T) (string, hotplug.DesiredVolume) {
	t.Helper()
	const launcher, attach = types.UID("33333333-frozen"), types.UID("44444444-frozen-attach")
	must(t, os.MkdirAll(filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcher))), 0o755))
	dir := filepath.Join(n.real, kubelet.VolumesDir(string(attach)), "kubernetes.io~csi", "pv-frozen", "mount")
	testutil.NewFilesystem(t, "ext4", 16<<20, dir)
	must(t, os.WriteFile(filepath.Join(dir, "disk.img"), make([]byte, 1<<20), 0o644))
	return dir, hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcher,
		Source: hotplug.Source{AttachmentPodUID: attach, PVName: "pv-frozen"}}
}

// detachAll detaches what the launchers hold.
func detachAll(t *testing.T, e *Engine, launchers ...types.UID) {
	t.Helper()
	ctx := context.Background()
	snap, err := e.Snapshot(ctx)
	must(t, err)
	for _, l := range launchers {
		obs, err := e.Observe(ctx, snap, l)
		must(t, err)
		for _, o := range obs {
			_, _ = e.Detach(ctx, snap, l, o)
		}
	}
}

// hungRunner is the runner of c holding the launcher's volume's call given
// up on.
func hungRunner(t *testing.T, c *storageCalls, launcher types.UID, volume, what string) *isolation.MountNamespace {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.hung[hungKey{growKey{launcher, volume}, what}]
	if !ok {
		t.Fatalf("no %s of %s/%s is held", what, launcher, volume)
	}
	return h.ns
}

// TestSweepGrowthLeftovers: a growth killed between its mount and its
// unmount leaves the tenant's filesystem mounted in the private directory,
// pinning its device; the next start unmounts it. Both ways of listing the
// directory's mounts find it: statmount of its entries, and the whole
// table where the kernel cannot answer (Config.WholeTable stands in).
func TestSweepGrowthLeftovers(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, whole := range []bool{false, true} {
		t.Run(fmt.Sprintf("whole-table=%v", whole), func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			must(t, err)
			root, private := filepath.Join(dir, "kubelet"), filepath.Join(dir, "grow")
			must(t, os.MkdirAll(root, 0o755))
			leftover := filepath.Join(private, "grow-1234")
			must(t, os.MkdirAll(leftover, 0o700))
			fs := testutil.NewFilesystem(t, "ext4", 16<<20, leftover)
			// A second mount on the first: the sweep unmounts the stack.
			must(t, unix.Mount(leftover, leftover, "", unix.MS_BIND, ""))
			t.Cleanup(func() {
				for unix.Unmount(leftover, unix.MNT_DETACH) == nil {
				}
			})
			e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: root,
				CgroupRoot: "/sys/fs/cgroup", CgroupMode: blockdev.CgroupAuto, SysRoot: "/sys", DevRoot: "/dev",
				PrivateDir: private, WholeTable: whole})
			must(t, err)
			defer e.Close()
			n, err := e.SweepGrowthLeftovers()
			if err != nil || n != 1 {
				t.Fatalf("sweep = %d, %v; want 1 leftover", n, err)
			}
			if _, err := os.Stat(leftover); !os.IsNotExist(err) {
				t.Fatalf("leftover mount point still there: %v", err)
			}
			// The device is free again: nothing holds it mounted.
			t2, err := mountinfo.ReadTable("/proc/self/mountinfo")
			must(t, err)
			if got := t2.ByDevice(uint32(unix.Major(fs.Dev(t))), uint32(unix.Minor(fs.Dev(t)))); len(got) != 0 {
				t.Fatalf("the device is still mounted: %+v", got)
			}
		})
	}
}

// TestFullOrReadOnlyHotplugDisks: a launcher's hotplug-disks that is full
// (no inode left) or read-only gets a clear error naming the cause, and no
// partial state: no target file, no mount.
func TestFullOrReadOnlyHotplugDisks(t *testing.T) {
	for _, tc := range []struct {
		name, opts, want string
	}{
		{"read-only", "ro", "read-only file system"},
		{"full", "nr_inodes=2", "no space left on device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newLinkedRoot(t)
			dir := filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID)))
			must(t, unix.Mount("hotplug-disks", dir, "tmpfs", 0, "size=1m,"+tc.opts))
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			if tc.name == "full" {
				// Use up the inodes the directory has left.
				for i := 0; ; i++ {
					if os.WriteFile(filepath.Join(dir, fmt.Sprintf("junk%d", i)), nil, 0o644) != nil {
						break
					}
				}
			}
			e := n.engine(t)
			snap, err := e.Snapshot(context.Background())
			must(t, err)
			v := hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID,
				Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}}
			_, err = e.Attach(context.Background(), snap, v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("attach into a %s hotplug-disks = %v, want an error saying %q", tc.name, err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(dir, "fs.img")); !os.IsNotExist(err) {
				t.Fatalf("partial state left: %v", err)
			}
		})
	}
}

// TestUnpublishedBlockRuleIsRepaired (kubevirt#14825): once the attachment
// pod was replaced, a block volume is no longer published, yet its
// launcher's device rule can still be lost (runc update, daemon-reload, a
// container restart). A resync's verify grants it again, after a restart
// too, but only while the node still names the disk it was made for: a
// major:minor given to another disk is never granted.
func TestUnpublishedBlockRuleIsRepaired(t *testing.T) {
	n := newLinkedRoot(t)
	compute := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(launcherUID), computeID)
	// A runtime's list: nothing but what it granted.
	must(t, os.WriteFile(filepath.Join(compute, "devices.deny"), []byte("a"), 0))
	cfg := Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: n.configured,
		CgroupRoot: n.cgroupRoot, CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107}
	e, err := New(cfg)
	must(t, err)
	defer func() { e.Close() }()
	ctx := context.Background()
	v := hotplug.DesiredVolume{Name: "blk", Mode: kubevirt.Block, LauncherUID: launcherUID,
		ComputeContainerID: "containerd://" + computeID, Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-blk"}}
	verify := func(want outcome.Result) {
		t.Helper()
		snap, err := e.Snapshot(ctx)
		must(t, err)
		if got, err := e.Attach(ctx, snap, v); err != nil || got != want {
			t.Fatalf("attach = %s, %v; want %s", got, err, want)
		}
	}
	verify(outcome.Created)
	pub := filepath.Join(n.real, kubelet.CSIPublishFile("pv-blk", string(attachUID)))
	dev := deviceOf(t, pub)
	// The attachment pod is replaced: the kubelet unpublishes the volume.
	must(t, unix.Unmount(pub, unix.MNT_DETACH))
	must(t, os.Remove(filepath.Join(n.real, kubelet.VolumeDevicesDir(string(attachUID)), "kubernetes.io~csi", "pv-blk")))
	verify(outcome.Unchanged)

	lose := func() {
		t.Helper()
		must(t, os.WriteFile(filepath.Join(compute, "devices.deny"), []byte(dev.String()+" rwm"), 0))
		if ok, err := e.rules.Allowed(computeOf(v), dev); err != nil || ok {
			t.Fatalf("rule after it was rewritten away: allowed %v, %v", ok, err)
		}
	}
	lose()
	verify(outcome.Created) // granted again
	verify(outcome.Unchanged)

	e.Close()
	e, err = New(cfg) // a restarted agent knows only the node
	must(t, err)
	lose()
	verify(outcome.Created)

	// The disk goes away and its number is given to another one.
	lose()
	loop := "/dev/loop" + fmt.Sprint(dev.Minor)
	testutil.Run(t, "losetup", "-d", loop)
	backing := filepath.Join(t.TempDir(), "stranger.img")
	must(t, os.WriteFile(backing, make([]byte, 1<<20), 0o600))
	testutil.Run(t, "losetup", loop, backing)
	snap, err := e.Snapshot(ctx)
	must(t, err)
	if _, err := e.Attach(ctx, snap, v); !errors.Is(err, blockdev.ErrUnconfirmed) {
		t.Fatalf("attach after the number went to another disk = %v, want ErrUnconfirmed", err)
	}
	if ok, err := e.rules.Allowed(computeOf(v), dev); err != nil || ok {
		t.Fatalf("another disk's number was granted: allowed %v, %v", ok, err)
	}
}

func deviceOf(t *testing.T, path string) blockdev.Device {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(path, &st))
	return blockdev.Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
}

// TestLauncherMustSeeTheMount: an attach counts only once the launcher
// sees it. A launcher whose view of hotplug-disks receives the host's
// mounts (HostToContainer) sees disk.img; one whose view is private (a
// launcher started before the pods dir was shared) sees the empty target
// file, and the engine says so on the attach and on every observe.
func TestLauncherMustSeeTheMount(t *testing.T) {
	n := newLinkedRoot(t)
	l, ctr, e := n.launcherView(t, "ctr-hotplug-disks")
	ctx := context.Background()
	v := hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID,
		Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}}
	observe := func() hotplug.ObservedVolume {
		t.Helper()
		snap, err := e.Snapshot(ctx)
		must(t, err)
		o, err := e.Observe(ctx, snap, launcherUID)
		if err != nil || len(o) != 1 {
			t.Fatalf("observe = %+v, %v; want the bind", o, err)
		}
		return o[0]
	}
	snap, err := e.Snapshot(ctx)
	must(t, err)
	if r, err := e.Attach(ctx, snap, v); err != nil || r != outcome.Mounted {
		t.Fatalf("attach into a launcher that receives mounts = %s, %v", r, err)
	}
	if o := observe(); o.NotPropagated || !o.Healthy(kubevirt.Filesystem) || len(e.sight.seen) != 1 {
		t.Fatalf("observed %+v (confirmed %v), want healthy and seen by the launcher", o, e.sight.seen)
	}
	if got, err := e.Detach(ctx, snap, launcherUID, observe()); err != nil || got != outcome.Removed {
		t.Fatalf("detach = %s, %v", got, err)
	}

	l.Exec(t, "mount --make-private "+ctr)
	snap, err = e.Snapshot(ctx)
	must(t, err)
	r, err := e.Attach(ctx, snap, v)
	if r != outcome.Mounted || !errors.Is(err, hotplug.ErrNotPropagated) || !strings.Contains(err.Error(), "HostToContainer") {
		t.Fatalf("attach into a private view = %s, %v; want mounted with ErrNotPropagated explaining the cause", r, err)
	}
	if o := observe(); !o.NotPropagated || !o.Healthy(kubevirt.Filesystem) {
		t.Fatalf("observed %+v, want healthy but not propagated", o)
	}
}

// TestBlockWithoutComputeContainer: while the launcher's pod status names
// no compute container, or names one whose cgroup is not there (a restart
// the status has not caught up with), a block volume is not attached: the
// error says why and no node appears in hotplug-disks (nor is any rule
// granted to the pod in the container's stead: blockdev never writes the
// pod cgroup).
func TestBlockWithoutComputeContainer(t *testing.T) {
	n := newLinkedRoot(t)
	e := n.engine(t)
	for _, tt := range []struct {
		id   string
		want error
	}{
		{"", podcgroup.ErrNoContainerID},
		{"containerd://c0ffee0000000000000000000000000000000000000000000000000000000002", podcgroup.ErrContainerNotFound},
	} {
		snap, err := e.Snapshot(context.Background())
		must(t, err)
		v := hotplug.DesiredVolume{Name: "blk", Mode: kubevirt.Block, LauncherUID: launcherUID, ComputeContainerID: tt.id,
			Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-blk"}}
		if got, err := e.Attach(context.Background(), snap, v); !errors.Is(err, tt.want) || got != outcome.Unchanged {
			t.Fatalf("attach for compute container %q = %s, %v; want unchanged and %v", tt.id, got, err, tt.want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID))))
	if err != nil || len(entries) != 0 {
		t.Fatalf("hotplug-disks: %v, %v; want empty", entries, err)
	}
}

// TestHungStorageHoldsOnlyItsVolume (#37, defect 2): an attach whose
// volume's filesystem is frozen waits in the kernel, with no deadline set
// here; meanwhile another launcher's filesystem and block attaches finish,
// and the frozen one finishes once thawed. On one thread serving the node
// they waited for the thaw (or the deadline).
func TestHungStorageHoldsOnlyItsVolume(t *testing.T) {
	n := newLinkedRoot(t)
	frozenDir, frozen := n.frozenVolume(t)
	e := n.engine(t)
	testutil.Run(t, "fsfreeze", "--freeze", frozenDir)
	thaw := sync.OnceFunc(func() { testutil.Run(t, "fsfreeze", "--unfreeze", frozenDir) })
	t.Cleanup(thaw)

	ctx := context.Background()
	snap, err := e.Snapshot(ctx)
	must(t, err)
	frozenDone := make(chan error, 1)
	go func() {
		_, err := e.Attach(ctx, snap, frozen)
		frozenDone <- err
	}()
	waitThreadIn(t, 'D')

	healthyDone := make(chan error, 1)
	go func() {
		fs := hotplug.DesiredVolume{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID,
			Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}}
		if r, err := e.Attach(ctx, snap, fs); err != nil || r != outcome.Mounted {
			healthyDone <- fmt.Errorf("filesystem attach = %s, %v; want mounted", r, err)
			return
		}
		r, err := e.Attach(ctx, snap, blockVolume(launcherUID))
		if err == nil && r != outcome.Created {
			err = fmt.Errorf("block attach = %s, want created", r)
		}
		healthyDone <- err
	}()
	select {
	case err := <-healthyDone:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the other launcher's attaches waited 30 s behind the frozen volume's")
	}
	select {
	case err := <-frozenDone:
		t.Fatalf("the frozen volume's attach returned before the thaw: %v", err)
	default:
	}
	thaw()
	select {
	case err := <-frozenDone:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the frozen volume's attach did not return 30 s after the thaw")
	}
	detachAll(t, e, launcherUID, frozen.LauncherUID)
}

// waitThreadIn waits until a thread of the process is in state (the
// frozen volume's call asleep in the kernel); the 30 s deadline only
// detects a hang.
func waitThreadIn(t *testing.T, state byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		must(t, err)
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
			if i := bytes.LastIndexByte(b, ')'); err == nil && i > 0 && i+2 < len(b) && b[i+2] == state {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no thread in state %c after 30 s", state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFeatures: this kernel (6.8 or later, the machine CI runs on) has
// statmount and openat2; mount notifications are reported as the kernel
// and the configuration allow, the same answer WatchMounts gets.
func TestFeatures(t *testing.T) {
	n := newLinkedRoot(t)
	e := n.engine(t)
	e.mountEvents = true // as DefaultConfig has it
	f := e.Features()
	if f.Statmount != nil || f.Openat2 != nil {
		t.Errorf("features %+v, want statmount and openat2 on this kernel", f)
	}
	w, err := mountwatch.Open(e.host, e.root)
	if err == nil {
		w.Close()
	}
	if (f.MountEvents == nil) != (err == nil) {
		t.Errorf("mount events reported %v; a watcher opens with %v", f.MountEvents, err)
	}
	e.mountEvents = false
	if f := e.Features(); !errors.Is(f.MountEvents, errors.ErrUnsupported) {
		t.Errorf("mount events off: %v, want ErrUnsupported", f.MountEvents)
	}
}
