// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/propagation"
)

// observationNode is a linkedRoot with one engine per observation path:
// statmount(2) per launcher, and the whole mountinfo per batch.
type observationNode struct {
	*linkedRoot
	paths map[string]*Engine
	vols  []hotplug.DesiredVolume
	// shm is a tmpfs of the host's (as /dev/shm is), the same one for
	// every case that binds it.
	shm string
}

var observationPaths = []string{"mountinfo", "statmount"}

func newObservationNode(t *testing.T) *observationNode {
	n := &observationNode{linkedRoot: newLinkedRoot(t), paths: map[string]*Engine{}}
	n.shm = filepath.Join(t.TempDir(), "shm")
	must(t, os.Mkdir(n.shm, 0o755))
	must(t, unix.Mount("tmpfs", n.shm, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(n.shm, unix.MNT_DETACH) })
	for _, path := range observationPaths {
		e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: n.configured,
			CgroupRoot: n.cgroupRoot, CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107,
			WholeTable: path == "mountinfo"})
		must(t, err)
		t.Cleanup(e.Close)
		if got, why := e.Observation(); got != path {
			t.Fatalf("engine observes with %s (%v), want %s", got, why, path)
		}
		n.paths[path] = e
	}
	n.vols = []hotplug.DesiredVolume{
		{Name: "fs", Mode: kubevirt.Filesystem, LauncherUID: launcherUID, Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-fs"}},
		{Name: "blk", Mode: kubevirt.Block, LauncherUID: launcherUID, ComputeContainerID: "containerd://" + computeID,
			Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-blk"}},
	}
	return n
}

func (n *observationNode) hotplug() string {
	return filepath.Join(n.real, kubelet.HotplugDisksDir(string(launcherUID)))
}

func (n *observationNode) disk() string {
	return filepath.Join(n.real, kubelet.VolumesDir(string(attachUID)), "kubernetes.io~csi", "pv-fs", "mount", "disk.img")
}

// observe is what an engine observes of the launcher, spelled for
// comparison (Unchecked is an error value).
func observe(t *testing.T, e *Engine) string {
	t.Helper()
	snap, err := e.Snapshot(context.Background())
	must(t, err)
	obs, err := e.Observe(context.Background(), snap, launcherUID)
	return fmt.Sprintf("%+v err=%v", obs, err)
}

// attachAll attaches every volume and spells the results.
func (n *observationNode) attachAll(e *Engine) string {
	snap, err := e.Snapshot(context.Background())
	if err != nil {
		return err.Error()
	}
	var out string
	for _, v := range n.vols {
		r, err := e.Attach(context.Background(), snap, v)
		out += fmt.Sprintf("%s: %s %v; ", v.Name, r, err != nil)
	}
	return out
}

// clean removes everything from the launcher's hotplug-disks, and
// hotplug-disks' own mount.
func (n *observationNode) clean(t *testing.T) {
	t.Helper()
	if fi, err := os.Lstat(n.hotplug()); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		must(t, os.Remove(n.hotplug()))
		must(t, os.Mkdir(n.hotplug(), 0o755))
	}
	for unix.Unmount(n.hotplug(), unix.MNT_DETACH) == nil {
	}
	entries, err := os.ReadDir(n.hotplug())
	must(t, err)
	for _, en := range entries {
		p := filepath.Join(n.hotplug(), en.Name())
		for unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) == nil {
		}
		must(t, os.RemoveAll(p))
	}
}

func bindOn(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %q on %q: %v", src, dst, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

// observationCases are what a launcher's hotplug-disks can hold, each made
// with the engine e from an empty directory.
var observationCases = []struct {
	name  string
	build func(t *testing.T, n *observationNode, e *Engine)
}{
	{"nothing", func(*testing.T, *observationNode, *Engine) {}},
	{"attached", func(t *testing.T, n *observationNode, e *Engine) { n.attachAll(e) }},
	{"a second bind stacked on the target", func(t *testing.T, n *observationNode, e *Engine) {
		n.attachAll(e)
		bindOn(t, n.disk(), filepath.Join(n.hotplug(), "fs.img"))
	}},
	{"the bind made shared, another slave to it", func(t *testing.T, n *observationNode, e *Engine) {
		n.attachAll(e)
		target, other := filepath.Join(n.hotplug(), "fs.img"), filepath.Join(n.hotplug(), "other.img")
		must(t, unix.Mount("", target, "", unix.MS_SHARED, ""))
		must(t, os.WriteFile(other, nil, 0o660))
		bindOn(t, target, other)
		must(t, unix.Mount("", other, "", unix.MS_SLAVE, ""))
	}},
	{"a deleted source", func(t *testing.T, n *observationNode, e *Engine) {
		src := filepath.Join(filepath.Dir(n.disk()), "old.img")
		must(t, os.WriteFile(src, nil, 0o644))
		target := filepath.Join(n.hotplug(), "fs.img")
		must(t, os.WriteFile(target, nil, 0o660))
		bindOn(t, src, target)
		must(t, os.Remove(src))
	}},
	{"a dead filesystem under the bind", func(t *testing.T, n *observationNode, e *Engine) {
		d := filepath.Join(t.TempDir(), "xfs")
		testutil.NewFilesystem(t, "xfs", testutil.MinXFSSize, d)
		must(t, os.WriteFile(filepath.Join(d, "disk.img"), nil, 0o644))
		target := filepath.Join(n.hotplug(), "fs.img")
		must(t, os.WriteFile(target, nil, 0o660))
		bindOn(t, filepath.Join(d, "disk.img"), target)
		testutil.Run(t, "xfs_io", "-x", "-c", "shutdown", d)
	}},
	{"a mount on the block node", func(t *testing.T, n *observationNode, e *Engine) {
		n.attachAll(e)
		bindOn(t, n.disk(), filepath.Join(n.hotplug(), "blk"))
	}},
	{"a directory volume", func(t *testing.T, n *observationNode, e *Engine) {
		d := filepath.Join(n.hotplug(), "dump")
		must(t, os.Mkdir(d, 0o750))
		bindOn(t, filepath.Dir(n.disk()), d)
	}},
	{"hotplug-disks a memory-medium emptyDir", func(t *testing.T, n *observationNode, e *Engine) {
		must(t, unix.Mount("tmpfs", n.hotplug(), "tmpfs", 0, "size=4m"))
		n.attachAll(e)
	}},
	{"hotplug-disks a symlink to a host directory", func(t *testing.T, n *observationNode, e *Engine) {
		must(t, os.Remove(n.hotplug()))
		must(t, os.Symlink(n.shm, n.hotplug()))
	}},
	{"hotplug-disks a bind of a tmpfs mounted elsewhere", func(t *testing.T, n *observationNode, e *Engine) {
		must(t, unix.Mount(n.shm, n.hotplug(), "", unix.MS_BIND, ""))
	}},
}

// TestObservationPathsAgree runs both observation paths against the same
// node: for each thing a launcher's hotplug-disks can hold, what the
// statmount engine observes must be what the mountinfo engine observes, at
// the same moment; then each path repairs it from the same start (the
// case built again) with the same results and leaves the same launcher.
func TestObservationPathsAgree(t *testing.T) {
	n := newObservationNode(t)
	for _, tc := range observationCases {
		t.Run(tc.name, func(t *testing.T) {
			n.clean(t)
			tc.build(t, n, n.paths["mountinfo"])
			seen := map[string]string{}
			for _, path := range observationPaths {
				seen[path] = observe(t, n.paths[path])
			}
			if seen["statmount"] != seen["mountinfo"] {
				t.Errorf("observed differently:\nstatmount %s\nmountinfo %s", seen["statmount"], seen["mountinfo"])
			}
			repaired := map[string]string{}
			for _, path := range observationPaths {
				n.clean(t)
				tc.build(t, n, n.paths["mountinfo"])
				e := n.paths[path]
				repaired[path] = n.attachAll(e) + " then " + observe(t, e)
			}
			if repaired["statmount"] != repaired["mountinfo"] {
				t.Errorf("repaired differently:\nstatmount %s\nmountinfo %s", repaired["statmount"], repaired["mountinfo"])
			}
			t.Logf("observed: %s\nrepaired: %s", seen["statmount"], repaired["statmount"])
		})
	}
	n.clean(t)
}

// TestObservationStatmountReadsOneLauncher: with statmount, a batch reads
// no table (Entries 0), and a launcher whose hotplug-disks is a mount of
// its own is judged from the whole table, which is read once per batch.
func TestObservationStatmountReadsOneLauncher(t *testing.T) {
	n := newObservationNode(t)
	e := n.paths["statmount"]
	snap, err := e.Snapshot(context.Background())
	must(t, err)
	if snap.Entries() != 0 {
		t.Fatalf("a statmount batch read %d entries up front, want none", snap.Entries())
	}
	tbl, err := e.tableFor(e.ns, snap, launcherUID)
	must(t, err)
	if tbl.Len() != 1 {
		t.Fatalf("an empty hotplug-disks read as %d mounts, want its directory's mount alone", tbl.Len())
	}
	bs := snap.(*beneathSnapshot)
	if bs.whole != nil {
		t.Fatal("the whole table was read for a plain hotplug-disks")
	}
	must(t, unix.Mount("tmpfs", n.hotplug(), "tmpfs", 0, "size=4m"))
	t.Cleanup(func() { _ = unix.Unmount(n.hotplug(), unix.MNT_DETACH) })
	a, err := e.tableFor(e.ns, snap, launcherUID)
	must(t, err)
	b, err := e.tableFor(e.ns, snap, launcherUID)
	must(t, err)
	if a != b || a != bs.whole || a.Len() < 2 {
		t.Fatalf("a memory-medium hotplug-disks was not judged from the batch's one whole table")
	}
	if _, err := e.tableFor(e.ns, tableSnapshot{}, launcherUID); err == nil || errors.Is(err, hotplug.ErrStuck) {
		t.Fatalf("an empty table snapshot gave %v, want a plain error", err)
	}
}

// TestObservationKeptUntilChanged: with statmount, the mounts Observe read
// for a launcher serve the snapshot's later calls about it (a verify that
// changes nothing keeps them) until a call changes the launcher; the call
// after that reads again, so a second detach in the same snapshot finds
// the target gone instead of acting on the first one's table.
func TestObservationKeptUntilChanged(t *testing.T) {
	n := newObservationNode(t)
	e := n.paths["statmount"]
	ctx := context.Background()
	n.clean(t)
	t.Cleanup(func() { n.clean(t) })
	if got, want := n.attachAll(e), "fs: mounted false; blk: created false; "; got != want {
		t.Fatalf("attach: %s, want %s", got, want)
	}
	snap, err := e.Snapshot(ctx)
	must(t, err)
	obs, err := e.Observe(ctx, snap, launcherUID)
	must(t, err)
	bs := snap.(*beneathSnapshot)
	listed, ok := bs.kept(launcherUID)
	if !ok {
		t.Fatal("Observe kept no mounts for the launcher")
	}
	if tbl, err := e.tableFor(e.ns, snap, launcherUID); err != nil || tbl != listed {
		t.Fatalf("a call after Observe read the launcher again (err %v)", err)
	}
	if r, err := e.Attach(ctx, snap, n.vols[1]); err != nil || r != outcome.Unchanged {
		t.Fatalf("verify of the block volume: %s %v, want unchanged", r, err)
	}
	if _, ok := bs.kept(launcherUID); !ok {
		t.Fatal("a verify that changed nothing dropped the kept mounts")
	}
	var fs hotplug.ObservedVolume
	for _, o := range obs {
		if o.Name == "fs" {
			fs = o
		}
	}
	for k, want := range []outcome.Result{outcome.Removed, outcome.Unchanged} {
		if r, err := e.Detach(ctx, snap, launcherUID, fs); err != nil || r != want {
			t.Fatalf("detach %d of fs: %s %v, want %s", k+1, r, err, want)
		}
		if _, ok := bs.kept(launcherUID); ok {
			t.Fatalf("detach %d: the launcher's mounts are still kept", k+1)
		}
	}
}

// TestPropagationGatePathsAgree: the readiness gate gives one verdict on
// both observation paths, whether the pods directory's mount is shared or
// private; where statmount works it reads that mount alone. A directory
// not made yet is on its nearest parent's mount on both paths.
func TestPropagationGatePathsAgree(t *testing.T) {
	n := newObservationNode(t)
	pods := filepath.Join(n.real, kubelet.PodsDir)
	must(t, unix.Mount(pods, pods, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pods, unix.MNT_DETACH) })
	for _, path := range observationPaths {
		m, err := n.paths[path].mountOf(filepath.Join(pods, "not-made", "yet"))
		if err != nil || m.MountPoint != pods {
			t.Errorf("%s: mount of a directory not made yet = %+v, %v; want the mount at %q", path, m, err, pods)
		}
	}
	for _, tc := range []struct {
		name       string
		flag       uintptr
		wantShared bool
	}{
		{"shared", unix.MS_SHARED, true},
		{"private", unix.MS_PRIVATE, false},
	} {
		must(t, unix.Mount("", pods, "", tc.flag, ""))
		for _, path := range observationPaths {
			e := n.paths[path]
			e.gateAt = time.Time{} // a verdict of the case before is not this one's
			err := e.CheckPropagation(context.Background())
			var notShared *propagation.NotSharedError
			switch {
			case tc.wantShared && err != nil:
				t.Errorf("%s, %s: gate = %v, want ready", tc.name, path, err)
			case !tc.wantShared && (!errors.As(err, &notShared) || notShared.MountPoint != pods):
				t.Errorf("%s, %s: gate = %v, want the mount %q named not shared", tc.name, path, err, pods)
			}
		}
	}
}
