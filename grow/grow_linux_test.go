// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
)

const mib = int64(1 << 20)

// growFixture is a fake node: a shared kubelet root, a PVC filesystem on a
// loop device published for an attachment pod, its disk.img bound onto
// <vol>.img in a launcher's hotplug-disks dir, and that launcher.
type growFixture struct {
	kubelet   string
	csiMount  string // pods/<hp>/volumes/kubernetes.io~csi/<pv>/mount
	image     string // disk.img in csiMount
	targetDir string // relative to kubelet
	target    string // absolute <vol>.img
	loop      *testutil.Loop
	launcher  *testutil.Launcher
	grower    *Grower
	ioctls    *fakeIoctls
	mountIDs  []int // every mount once the fixture stood
}

// fakeIoctls stands in for the kernel's resize calls. It checks that each
// call is made on a readable, unwritable, non-O_PATH descriptor of the
// launcher's bind itself (same inode, same mount), records it, and then
// fails with err when set, does nothing when skip is set, or makes the real
// call.
type fakeIoctls struct {
	t      testing.TB
	target string // the launcher's <vol>.img
	calls  []resizeCall
	err    error
	skip   bool
}

type resizeCall struct {
	op        string // "xfs" or "ext4"
	newBlocks uint64
	imaxpct   uint32
}

var _ ResizeIoctls = (*fakeIoctls)(nil)

func (r *fakeIoctls) GrowXFSData(f *os.File, newBlocks uint64, imaxpct uint32) error {
	r.record(f, resizeCall{"xfs", newBlocks, imaxpct})
	if r.err != nil || r.skip {
		return r.err
	}
	return KernelIoctls{}.GrowXFSData(f, newBlocks, imaxpct)
}

func (r *fakeIoctls) ResizeExt4(f *os.File, newBlocks uint64) error {
	r.record(f, resizeCall{"ext4", newBlocks, 0})
	if r.err != nil || r.skip {
		return r.err
	}
	return KernelIoctls{}.ResizeExt4(f, newBlocks)
}

func (r *fakeIoctls) record(f *os.File, c resizeCall) {
	r.calls = append(r.calls, c)
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		r.t.Errorf("fcntl of the descriptor resized through: %v", err)
	} else if flags&unix.O_PATH != 0 || flags&unix.O_ACCMODE != unix.O_RDONLY {
		r.t.Errorf("resize through a descriptor opened with flags %#o, want O_RDONLY without O_PATH", flags)
	}
	var got, want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &got); err != nil {
		r.t.Error(err)
	}
	if err := unix.Stat(r.target, &want); err != nil {
		r.t.Error(err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		r.t.Errorf("resize through inode %d:%d, not the target's %d:%d", got.Dev, got.Ino, want.Dev, want.Ino)
	}
	gotID, err := isolation.MountID(f)
	if err != nil {
		r.t.Error(err)
	}
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		r.t.Fatal(err)
	}
	if top, _ := tab.Top(r.target); top == nil || int(gotID) != top.ID {
		r.t.Errorf("resize through mount %d, not the launcher's bind %+v", gotID, top)
	}
}

func newGrowFixture(t testing.TB, fstype string, size, imageSize int64) *growFixture {
	t.Helper()
	testutil.RequiresRoot(t)
	f := &growFixture{kubelet: t.TempDir()}
	testutil.MakeShared(t, f.kubelet)
	f.csiMount = filepath.Join(f.kubelet, "pods/hp-uid-1/volumes/kubernetes.io~csi/pv-1/mount")
	f.loop = testutil.NewFilesystem(t, fstype, size, f.csiMount)
	f.image = filepath.Join(f.csiMount, "disk.img")
	img, err := os.OpenFile(f.image, os.O_CREATE|os.O_RDWR, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	if err := img.Truncate(imageSize); err != nil {
		t.Fatal(err)
	}
	img.Close()

	f.targetDir = "pods/launcher-uid-1/volumes/kubernetes.io~empty-dir/hotplug-disks"
	if err := os.MkdirAll(filepath.Join(f.kubelet, f.targetDir), 0o750); err != nil {
		t.Fatal(err)
	}
	f.target = filepath.Join(f.kubelet, f.targetDir, "vol.img")
	if err := os.WriteFile(f.target, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	// The launcher runs before the volume is hotplugged and sees the bind
	// through propagation, as a HostToContainer emptyDir does.
	f.launcher = testutil.StartLauncher(t)
	if err := unix.Mount(f.image, f.target, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %q onto %q: %v", f.image, f.target, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(f.target, unix.MNT_DETACH) })

	ns, err := isolation.OpenMountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	private := filepath.Join(t.TempDir(), "grow")
	f.ioctls = &fakeIoctls{t: t, target: f.target}
	f.grower = &Grower{NS: ns, KubeletRoot: f.kubelet, SysRoot: "/sys", DevRoot: "/dev", PrivateDir: private, Ioctls: f.ioctls}
	f.mountIDs = mountIDs(t)
	return f
}

func (f *growFixture) grow(t testing.TB, opts Options) (Result, error) {
	t.Helper()
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return f.grower.Grow(tab, f.targetDir, "vol.img", opts)
}

// writeData has the launcher write through its view of the target and
// returns the image's checksum.
func (f *growFixture) writeData(t testing.TB) string {
	t.Helper()
	return f.launcher.Exec(t, fmt.Sprintf("dd if=/dev/urandom of=%q bs=1M count=8 seek=3 conv=notrunc,fsync 2>/dev/null && sha256sum < %q", f.target, f.target))
}

func (f *growFixture) checksum(t testing.TB) string {
	t.Helper()
	return f.launcher.Exec(t, fmt.Sprintf("sha256sum < %q", f.target))
}

// launcherStatfs is the size df would show inside the launcher.
func (f *growFixture) launcherStatfs(t testing.TB) int64 {
	t.Helper()
	out := f.launcher.Exec(t, fmt.Sprintf("stat -f -c '%%b %%S' %q", f.target))
	var blocks, bsize int64
	if _, err := fmt.Sscan(out, &blocks, &bsize); err != nil {
		t.Fatalf("stat -f output %q: %v", out, err)
	}
	return blocks * bsize
}

// mountIDs lists the ids of every mount in this namespace.
func mountIDs(t testing.TB) []int {
	t.Helper()
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, m := range tab.Mounts() {
		ids = append(ids, m.ID)
	}
	return ids
}

// checkMounts asserts exactly one mount on the target, no mount that was not
// there when the fixture stood, and nothing below the private dir.
func (f *growFixture) checkMounts(t testing.TB) {
	t.Helper()
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range tab.Mounts() {
		if !slices.Contains(f.mountIDs, m.ID) {
			t.Errorf("new mount %d: %s on %s", m.ID, m.Source, m.MountPoint)
		}
	}
	if top, n := tab.Top(f.target); n != 1 || top.Root != "/disk.img" {
		t.Errorf("target has %d mounts (top %+v), want exactly the bind of /disk.img", n, top)
	}
	for _, m := range tab.Mounts() {
		if strings.HasPrefix(m.MountPoint, f.grower.PrivateDir+"/") {
			t.Errorf("private mount left behind: %s on %s", m.Source, m.MountPoint)
		}
	}
	entries, _ := os.ReadDir(f.grower.PrivateDir)
	if len(entries) != 0 {
		t.Errorf("private dir %q still holds %d entries", f.grower.PrivateDir, len(entries))
	}
}

// unpublish is the kubelet's NodeUnpublish/NodeUnstage for the replaced
// attachment pod: only the launcher's bind keeps the filesystem alive.
func (f *growFixture) unpublish(t testing.TB) {
	t.Helper()
	if err := unix.Unmount(f.csiMount, 0); err != nil {
		t.Fatalf("unpublish %q: %v", f.csiMount, err)
	}
}

func TestGrowCornerCaseXFS(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 64*mib)
	sum := f.writeData(t)
	f.unpublish(t)
	f.loop.Grow(t, 700*mib)
	before := f.launcherStatfs(t)

	var res Result
	var err error
	start := time.Now()
	withoutPath(t, func() { res, err = f.grow(t, Options{GrowFilesystem: true}) })
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Grow: %v", err)
	}
	t.Logf("xfs 400 -> 700 MiB grown in %v: %+v", elapsed, res)
	// The whole device in 4 KiB blocks, and mkfs.xfs's inode space limit
	// below 1 TiB kept as it was.
	if want := []resizeCall{{"xfs", uint64(700 * mib / 4096), 25}}; !slices.Equal(f.ioctls.calls, want) {
		t.Errorf("resize calls %+v, want %+v", f.ioctls.calls, want)
	}
	if res.Device != f.loop.Device || res.FSType != "xfs" || res.DeviceBytes != 700*mib || res.FilesystemBytes != 400*mib {
		t.Errorf("result %+v, want xfs on %s, 700 MiB device, 400 MiB filesystem", res, f.loop.Device)
	}
	dev := f.loop.Dev(t)
	if res.Dev != fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)) {
		t.Errorf("Dev = %q, want %d:%d", res.Dev, unix.Major(dev), unix.Minor(dev))
	}
	if !res.NeedsGrowth || !res.Grown || res.FilesystemBefore != before || res.FilesystemAfter <= res.FilesystemBefore+250*mib {
		t.Errorf("result %+v: want grown by about 300 MiB from %d", res, before)
	}
	if got := f.launcherStatfs(t); got != res.FilesystemAfter {
		t.Errorf("launcher sees %d bytes, Grow reported %d", got, res.FilesystemAfter)
	}
	if got := f.checksum(t); got != sum {
		t.Errorf("checksum changed: %s, want %s", got, sum)
	}
	f.checkMounts(t)

	// A second check finds nothing to do.
	res, err = f.grow(t, Options{GrowFilesystem: true})
	if err != nil || res.NeedsGrowth || res.Grown || len(f.ioctls.calls) != 1 {
		t.Errorf("second Grow: %+v, %v, %d resize calls; want nothing done", res, err, len(f.ioctls.calls))
	}
}

func TestGrowExt4(t *testing.T) {
	f := newGrowFixture(t, "ext4", 400*mib, 64*mib)
	sum := f.writeData(t)
	f.unpublish(t)
	f.loop.Grow(t, 700*mib)
	before := f.launcherStatfs(t)

	var res Result
	var err error
	withoutPath(t, func() { res, err = f.grow(t, Options{GrowFilesystem: true}) })
	t.Logf("ext4 400 -> 700 MiB: %+v, %v", res, err)
	// mkfs.ext4 picks the block size by the size (1 KiB below 512 MiB).
	var sfs unix.Statfs_t
	if err := unix.Statfs(f.target, &sfs); err != nil {
		t.Fatal(err)
	}
	bs := sfs.Bsize
	if want := []resizeCall{{"ext4", uint64(700 * mib / bs), 0}}; !slices.Equal(f.ioctls.calls, want) {
		t.Errorf("resize calls %+v, want %+v", f.ioctls.calls, want)
	}
	if hasCapSysResource() {
		if err != nil || !res.Grown || f.launcherStatfs(t) <= before {
			t.Errorf("with CAP_SYS_RESOURCE: %+v, %v; want grown", res, err)
		}
	} else {
		if !errors.Is(err, ErrNoCapSysResource) || !errors.Is(err, unix.EPERM) {
			t.Fatalf("err = %v, want EPERM and ErrNoCapSysResource", err)
		}
		want := fmt.Sprintf("grow ext4 on %s (%s) for \"vol.img\": EXT4_IOC_RESIZE_FS from %d to %d blocks: operation not permitted: "+
			"the agent lacks CAP_SYS_RESOURCE, which online ext4 growth needs; run the DaemonSet privileged",
			f.loop.Device, res.Dev, 400*mib/bs, 700*mib/bs)
		if msg := err.Error(); msg != want {
			t.Errorf("error %q\nwant      %q", msg, want)
		}
		if res.Grown || res.FilesystemAfter != before || f.launcherStatfs(t) != before {
			t.Errorf("%+v: the filesystem changed although growth failed", res)
		}
	}
	if got := f.checksum(t); got != sum {
		t.Errorf("checksum changed: %s, want %s", got, sum)
	}
	f.checkMounts(t)
}

func TestGrowNothingToDo(t *testing.T) {
	for _, fstype := range []string{"ext4", "xfs"} {
		t.Run(fstype, func(t *testing.T) {
			f := newGrowFixture(t, fstype, 400*mib, 16*mib)
			f.ioctls.skip = true
			res, err := f.grow(t, Options{GrowFilesystem: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(f.ioctls.calls) != 0 || res.NeedsGrowth || res.Grown || res.DeviceSmaller {
				t.Errorf("%+v, %d resize calls: want no growth", res, len(f.ioctls.calls))
			}
			// mkfs used the whole device: the filesystem's own size is
			// exactly the device's, which the growth decision relies on.
			if res.FilesystemBytes != 400*mib || res.DeviceBytes != 400*mib {
				t.Errorf("filesystem %d, device %d bytes; want both 400 MiB", res.FilesystemBytes, res.DeviceBytes)
			}
			if res.FilesystemBefore <= 0 || res.FilesystemBefore != res.FilesystemAfter {
				t.Errorf("statfs sizes %d -> %d", res.FilesystemBefore, res.FilesystemAfter)
			}
			// Growth below the slack is left alone too.
			f.loop.Grow(t, 400*mib+SlackBytes)
			if res, err = f.grow(t, Options{GrowFilesystem: true}); err != nil || res.NeedsGrowth || len(f.ioctls.calls) != 0 {
				t.Errorf("within the slack: %+v, %v, %d calls", res, err, len(f.ioctls.calls))
			}
			// Reporting only: a grown device is seen but not acted on.
			f.loop.Grow(t, 600*mib)
			if res, err = f.grow(t, Options{}); err != nil || !res.NeedsGrowth || res.Grown || len(f.ioctls.calls) != 0 {
				t.Errorf("report only: %+v, %v, %d calls", res, err, len(f.ioctls.calls))
			}
		})
	}
}

func TestGrowNeverShrinks(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
	f.ioctls.skip = true
	// A device smaller than its filesystem (a broken backend, a wrong
	// device): reported, never acted on.
	f.loop.Grow(t, 350*mib)
	res, err := f.grow(t, Options{GrowFilesystem: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.DeviceSmaller || res.NeedsGrowth || res.Grown || len(f.ioctls.calls) != 0 {
		t.Errorf("%+v, %d calls: want DeviceSmaller reported and nothing done", res, len(f.ioctls.calls))
	}
	if res.DeviceBytes != 350*mib || res.FilesystemBytes != 400*mib {
		t.Errorf("device %d, filesystem %d", res.DeviceBytes, res.FilesystemBytes)
	}
	f.checkMounts(t)
}

func TestGrowDiskImage(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 64*mib)
	sum := f.writeData(t)
	f.unpublish(t)
	opts := Options{ExpandDiskImage: true, CapacityBytes: 200 * mib, FilesystemOverhead: 0.055}

	res, err := f.grow(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	// (1 - 0.055) * 200 MiB = 189 MiB; the 400 MiB filesystem has room.
	if !res.ImageGrown || res.DiskImageBefore != 64*mib || res.DiskImageAfter != 189*mib {
		t.Errorf("%+v: want disk.img grown from 64 to 189 MiB", res)
	}
	if got := f.launcher.Exec(t, fmt.Sprintf("stat -c %%s %q", f.target)); got != strconv.FormatInt(189*mib, 10) {
		t.Errorf("launcher sees %s bytes", got)
	}
	want := f.launcher.Exec(t, fmt.Sprintf("head -c %d %q | sha256sum", 64*mib, f.target))
	if want != sum {
		t.Errorf("the first 64 MiB changed: %s, want %s", want, sum)
	}

	for _, tt := range []struct {
		name     string
		capacity int64
	}{
		{"lower capacity does not shrink", 32 * mib},
		{"same capacity is a no-op", 200 * mib},
		{"unknown capacity is left alone", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.CapacityBytes = tt.capacity
			res, err := f.grow(t, o)
			if err != nil || res.ImageGrown || res.DiskImageBefore != 189*mib || res.DiskImageAfter != 189*mib {
				t.Errorf("%+v, %v: want disk.img left at 189 MiB", res, err)
			}
		})
	}

	t.Run("free space limits", func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Stat(f.target, &st); err != nil {
			t.Fatal(err)
		}
		usage, err := mount.FilesystemSize(f.target)
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.CapacityBytes = 10 << 30
		res, err := f.grow(t, o)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := mount.DiskImageSize(o.CapacityBytes, o.FilesystemOverhead, usage.AvailableBytes, st.Blocks*512)
		if !res.ImageGrown || res.DiskImageAfter != want || want >= 400*mib {
			t.Errorf("%+v: want disk.img at %d bytes, bounded by the filesystem", res, want)
		}
		var after unix.Stat_t
		if err := unix.Stat(f.target, &after); err != nil {
			t.Fatal(err)
		}
		if after.Size != want || after.Blocks != st.Blocks {
			t.Errorf("size %d blocks %d, want size %d and no new allocation (%d blocks)", after.Size, after.Blocks, want, st.Blocks)
		}
	})
	f.checkMounts(t)
}

func TestGrowRefusals(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
	dir := filepath.Join(f.kubelet, f.targetDir)
	if err := os.WriteFile(filepath.Join(dir, "plain.img"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.image, filepath.Join(dir, "link.img")); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(f.csiMount, "gone.img")
	if err := os.WriteFile(gone, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	deleted := filepath.Join(dir, "deleted.img")
	if err := os.WriteFile(deleted, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(gone, deleted, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(deleted, unix.MNT_DETACH) })
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, targetDir, vol string
		want                 error
	}{
		{"not mounted", f.targetDir, "plain", ErrRefused},
		{"symlink", f.targetDir, "link", isolation.ErrUnsafePath},
		{"source deleted", f.targetDir, "deleted", ErrRefused},
		{"dir escapes", "../etc", "vol", isolation.ErrUnsafePath},
		{"name with a slash", f.targetDir, "../hotplug-disks/vol", isolation.ErrUnsafePath},
		{"missing", f.targetDir, "absent", unix.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.grower.Grow(tab, tt.targetDir, tt.vol+".img", Options{GrowFilesystem: true, ExpandDiskImage: true, CapacityBytes: 1 << 30})
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if len(f.ioctls.calls) != 0 {
		t.Errorf("resize calls: %d", len(f.ioctls.calls))
	}
}

// BenchmarkGrowCheck is one Grow when nothing needs growing: the periodic
// cost per filesystem volume (mount table scanned once per batch, outside).
func BenchmarkGrowCheck(b *testing.B) {
	f := newGrowFixture(b, "xfs", 400*mib, 16*mib)
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{GrowFilesystem: true, ExpandDiskImage: true, CapacityBytes: 16 * mib, FilesystemOverhead: 0.055}
	b.ReportAllocs()
	for b.Loop() {
		res, err := f.grower.Grow(tab, f.targetDir, "vol.img", opts)
		if err != nil || res.NeedsGrowth || res.ImageGrown {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}

func TestGrowReadOnlyFilesystem(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
	// A superblock-level remount (no MS_BIND): the filesystem itself is
	// read-only, as a ReadOnlyMany PVC is.
	if err := unix.Mount("", f.csiMount, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	f.loop.Grow(t, 600*mib)
	res, err := f.grow(t, Options{GrowFilesystem: true})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("err = %v, want a read-only refusal", err)
	}
	if !res.NeedsGrowth || res.Grown || len(f.ioctls.calls) != 0 {
		t.Errorf("%+v, %d resize calls", res, len(f.ioctls.calls))
	}
	f.checkMounts(t)
}

// withoutPath runs fn with PATH emptied, so that any program fn tried to
// run would not be found: growth must need none.
func withoutPath(t testing.TB, fn func()) {
	t.Helper()
	old, had := os.LookupEnv("PATH")
	if err := os.Setenv("PATH", ""); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if had {
			_ = os.Setenv("PATH", old)
		} else {
			_ = os.Unsetenv("PATH")
		}
	}()
	fn()
}
