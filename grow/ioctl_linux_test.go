// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"bytes"
	"errors"
	"fmt"
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
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// TestGrowIoctlErrors: what the kernel answers a resize call reaches the
// caller as the errno itself, so that node's busy() can tell a resize that
// lost a race (EBUSY from ext4, EAGAIN from xfs) apart; EPERM on ext4
// without CAP_SYS_RESOURCE carries the capability hint, on xfs it does not.
func TestGrowIoctlErrors(t *testing.T) {
	tests := []struct {
		name, fstype string
		errno        unix.Errno
		wantHint     bool
	}{
		{"xfs growth already running", "xfs", unix.EAGAIN, false},
		{"ext4 resize already running", "ext4", unix.EBUSY, false},
		{"xfs without CAP_SYS_ADMIN", "xfs", unix.EPERM, false},
		{"ext4 without CAP_SYS_RESOURCE", "ext4", unix.EPERM, !hasCapSysResource()},
		{"ext4 out of space for metadata", "ext4", unix.ENOSPC, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newGrowFixture(t, tt.fstype, 400*mib, 16*mib)
			f.loop.Grow(t, 600*mib)
			f.ioctls.err = tt.errno
			res, err := f.grow(t, Options{GrowFilesystem: true})
			if !errors.Is(err, tt.errno) {
				t.Fatalf("err = %v, want it to wrap %v", err, tt.errno)
			}
			if got := errors.Is(err, ErrNoCapSysResource); got != tt.wantHint {
				t.Errorf("err = %v: capability hint %v, want %v", err, got, tt.wantHint)
			}
			if len(f.ioctls.calls) != 1 || !res.NeedsGrowth || res.Grown || res.FilesystemAfter != res.FilesystemBefore {
				t.Errorf("%+v, %d calls: want one failed call and nothing grown", res, len(f.ioctls.calls))
			}
			f.checkMounts(t)
		})
	}
}

// TestGrowReadOnlyBind: the kernel takes write access through the mount the
// call is made on, so a read-only launcher bind is refused up front, with
// no call.
func TestGrowReadOnlyBind(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
	if err := unix.Mount("", f.target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	f.loop.Grow(t, 600*mib)
	res, err := f.grow(t, Options{GrowFilesystem: true})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "the launcher's bind is read-only") {
		t.Errorf("err = %v, want a refusal naming the read-only bind", err)
	}
	if !res.NeedsGrowth || res.Grown || len(f.ioctls.calls) != 0 {
		t.Errorf("%+v, %d resize calls", res, len(f.ioctls.calls))
	}
}

// freeze freezes the filesystem mounted at dir and thaws it when t ends;
// thaw thaws it earlier.
func freeze(t testing.TB, dir string) {
	t.Helper()
	testutil.Run(t, "fsfreeze", "--freeze", dir)
	t.Cleanup(func() { _ = exec.Command("fsfreeze", "--unfreeze", dir).Run() })
}

func thaw(t testing.TB, dir string) {
	t.Helper()
	testutil.Run(t, "fsfreeze", "--unfreeze", dir)
}

// TestGrowFrozenXFS is the stuck case: a growth of a frozen filesystem
// waits in the kernel until the namespace's deadline (the engine's grow timeout)
// abandons it. What it measured is stale by then, and a later check may
// have decided otherwise: once thawed, the abandoned call returns without
// growing anything, and the next check grows the filesystem. Nothing is
// mounted meanwhile.
func TestGrowFrozenXFS(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
	f.loop.Grow(t, 700*mib)
	before := f.launcherStatfs(t)
	freeze(t, f.csiMount)
	f.grower.NS.SetTimeout(time.Second)

	_, err := f.grow(t, Options{GrowFilesystem: true})
	if !errors.Is(err, isolation.ErrStuck) {
		t.Fatalf("Grow on a frozen filesystem: %v, want ErrStuck", err)
	}
	f.checkMounts(t)
	thaw(t, f.csiMount)
	waitAbandonedReturned(t, f.grower.NS)
	if len(f.ioctls.calls) != 0 {
		t.Errorf("resize calls %+v after the thaw, want none from the abandoned growth", f.ioctls.calls)
	}
	if after := f.launcherStatfs(t); after != before {
		t.Errorf("launcher sees %d bytes after the thaw, was %d: the abandoned growth grew the filesystem", after, before)
	}
	res, err := f.grow(t, Options{GrowFilesystem: true})
	if err != nil || !res.Grown || res.FilesystemBytes != 400*mib {
		t.Errorf("the check after the thaw: %+v, %v; want it to grow the 400 MiB filesystem", res, err)
	}
	if len(f.ioctls.calls) != 1 {
		t.Errorf("resize calls %+v, want the later check's only", f.ioctls.calls)
	}
	if after := f.launcherStatfs(t); after <= before+250*mib {
		t.Errorf("launcher sees %d bytes, was %d", after, before)
	}
	f.checkMounts(t)
}

// TestGrowImageFrozen: an enlargement of disk.img abandoned while its
// filesystem is frozen does not enlarge it after the thaw; the next check
// does.
func TestGrowImageFrozen(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 64*mib)
	opts := Options{ExpandDiskImage: true, CapacityBytes: 200 * mib, FilesystemOverhead: 0.055}
	freeze(t, f.csiMount)
	f.grower.NS.SetTimeout(time.Second)

	if _, err := f.grow(t, opts); !errors.Is(err, isolation.ErrStuck) {
		t.Fatalf("Grow on a frozen filesystem: %v, want ErrStuck", err)
	}
	thaw(t, f.csiMount)
	waitAbandonedReturned(t, f.grower.NS)
	if fi, err := os.Stat(f.target); err != nil || fi.Size() != 64*mib {
		t.Fatalf("disk.img after the thaw: %v, %v; want it left at 64 MiB by the abandoned growth", fi.Size(), err)
	}
	res, err := f.grow(t, opts)
	if err != nil || !res.ImageGrown || res.DiskImageAfter != 189*mib {
		t.Errorf("the check after the thaw: %+v, %v; want disk.img grown to 189 MiB", res, err)
	}
	f.checkMounts(t)
}

// waitAbandonedReturned waits until no abandoned call of ns is still
// running; the deadline only catches one that never returns.
func waitAbandonedReturned(t *testing.T, ns *isolation.MountNamespace) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, stuck := ns.Health(time.Now()); stuck == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned growth did not return after the thaw")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// growChildEnv carries "<kubelet root>\n<target dir>" to the growth that
// TestGrowKilledMidway starts and kills (see TestMain).
const growChildEnv = "HPMOUNT_TEST_GROW_CHILD"

// runGrowChild grows vol.img in the target dir as the agent would, with the
// real ioctls, and says how it went on stdout.
func runGrowChild(spec string) int {
	root, dir, ok := strings.Cut(spec, "\n")
	if !ok {
		fmt.Println("bad spec", strconv.Quote(spec))
		return 2
	}
	ns, err := isolation.OpenMountNamespace("/proc/self/ns/mnt")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	g := &Grower{NS: ns, KubeletRoot: root, SysRoot: "/sys", DevRoot: "/dev"}
	res, err := g.Grow(tab, dir, "vol.img", Options{GrowFilesystem: true})
	fmt.Printf("%+v, %v\n", res, err)
	if err != nil {
		return 1
	}
	return 0
}

// TestGrowKilledMidway SIGKILLs a process in the middle of a growth (in
// its wait for the filesystem to take writes, a write of no bytes held
// there by a frozen filesystem, right before the resize call) and shows
// that nothing is left behind: no mount anywhere new, nothing in the
// private dir, the device not pinned once its mounts are gone, and a
// second growth completes.
func TestGrowKilledMidway(t *testing.T) {
	f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
	f.loop.Grow(t, 700*mib)
	before := f.launcherStatfs(t)
	freeze(t, f.csiMount)

	var out bytes.Buffer
	child := exec.Command("/proc/self/exe")
	child.Env = append(os.Environ(), growChildEnv+"="+f.kubelet+"\n"+f.targetDir)
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if child.ProcessState == nil {
			_ = child.Process.Kill()
			_ = exec.Command("fsfreeze", "--unfreeze", f.csiMount).Run()
			_ = child.Wait()
		}
	})
	if err := waitInSyscall(child.Process.Pid, unix.SYS_WRITE, 3, 0, 30*time.Second); err != nil {
		t.Fatalf("%v; child said: %s", err, out.String())
	}
	if err := child.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	thaw(t, f.csiMount)
	err := child.Wait()
	ws, _ := child.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL; it said: %s", err, out.String())
	}
	f.checkMounts(t)

	// A second growth completes: the kill took effect when the frozen
	// wait ended, before the resize call.
	res, err := f.grow(t, Options{GrowFilesystem: true})
	if err != nil || !res.Grown || res.FilesystemBytes != 400*mib {
		t.Fatalf("second growth: %+v, %v; want it to grow the 400 MiB filesystem", res, err)
	}
	if after := f.launcherStatfs(t); after <= before+250*mib {
		t.Errorf("launcher sees %d bytes, was %d", after, before)
	}
	f.checkMounts(t)
	assertUnpinned(t, f)
}

// assertUnpinned unmounts the launcher's bind and the published
// filesystem, neither lazily, and then opens the device exclusively, which
// fails with EBUSY while any superblock still holds it.
func assertUnpinned(t *testing.T, f *growFixture) {
	t.Helper()
	for _, mp := range []string{f.target, f.csiMount} {
		if err := unix.Unmount(mp, 0); err != nil {
			t.Fatalf("unmount %q: %v", mp, err)
		}
	}
	dev := f.loop.Dev(t)
	tab, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if left := tab.ByDevice(unix.Major(dev), unix.Minor(dev)); len(left) != 0 {
		t.Fatalf("the device is still mounted: %+v", left)
	}
	fd, err := unix.Open(f.loop.Device, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("exclusive open of %q: %v (the filesystem is still alive)", f.loop.Device, err)
	}
	unix.Close(fd)
}

// waitInSyscall waits until a thread of pid is in syscall nr with its
// argument number arg (from 1) equal to value, as its
// /proc/<pid>/task/<tid>/syscall says: the syscall number, then the
// arguments in hex.
func waitInSyscall(pid, nr, arg int, value uintptr, timeout time.Duration) error {
	want := strconv.Itoa(nr)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				continue
			}
			fields := strings.Fields(string(b))
			if len(fields) <= arg || fields[0] != want {
				continue
			}
			if n, err := strconv.ParseUint(strings.TrimPrefix(fields[arg], "0x"), 16, 64); err == nil && uintptr(n) == value {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("process %d was not in syscall %d with argument %d = %#x within %s", pid, nr, arg, value, timeout)
}

// TestGrowRereadsBeforeResize: the resize calls take an absolute block
// count, and another resizer (the kubelet's NodeExpandVolume) may grow the
// filesystem between the growth's measurement and its call. The size is
// read again right before the call, and a count not above it is never sent:
// to an xfs that can shrink, a smaller count is a shrink request.
func TestGrowRereadsBeforeResize(t *testing.T) {
	tests := []struct {
		name string
		// raced is how far another resizer grows the device and the
		// filesystem after the measurement; 0: nobody does.
		raced     int64
		wantCalls []resizeCall
		wantFS    int64
	}{
		{"nobody raced", 0, []resizeCall{{"xfs", uint64(700 * mib / 4096), 25}}, 700 * mib},
		{"another resizer grew it as far", 700 * mib, nil, 700 * mib},
		{"another resizer grew it further", 800 * mib, nil, 800 * mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newGrowFixture(t, "xfs", 400*mib, 16*mib)
			f.loop.Grow(t, 700*mib)
			if tt.raced != 0 {
				f.grower.beforeResize = func() { f.growBehindTheAgent(t, tt.raced) }
			}
			res, err := f.grow(t, Options{GrowFilesystem: true})
			if err != nil {
				t.Fatalf("Grow: %v", err)
			}
			if !slices.Equal(f.ioctls.calls, tt.wantCalls) {
				t.Errorf("resize calls %+v, want %+v", f.ioctls.calls, tt.wantCalls)
			}
			if res.FilesystemBytes != 400*mib || res.Grown != (tt.raced == 0) {
				t.Errorf("%+v: want 400 MiB measured, grown by this call: %v", res, tt.raced == 0)
			}
			geo, err := xfsGeometryOf(f.target)
			if err != nil {
				t.Fatal(err)
			}
			if got := int64(geo.DataBlocks) * int64(geo.BlockSize); got != tt.wantFS {
				t.Errorf("the filesystem holds %d MiB, want %d MiB", got>>20, tt.wantFS>>20)
			}
			f.checkMounts(t)
		})
	}
}

// growBehindTheAgent is another resizer: it grows the device to size and
// the xfs on it to all of it, as NodeExpandVolume's xfs_growfs would.
func (f *growFixture) growBehindTheAgent(t testing.TB, size int64) {
	t.Helper()
	if size > 700*mib {
		f.loop.Grow(t, size)
	}
	file, err := os.Open(f.target)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	geo, err := xfsGeometry(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := (KernelIoctls{}).GrowXFSData(file, uint64(size)/uint64(geo.BlockSize), geo.IMaxPct); err != nil {
		t.Fatalf("grow behind the agent to %d MiB: %v", size>>20, err)
	}
}

func xfsGeometryOf(path string) (xfsGeometryV1, error) {
	file, err := os.Open(path)
	if err != nil {
		return xfsGeometryV1{}, err
	}
	defer file.Close()
	return xfsGeometry(file)
}
