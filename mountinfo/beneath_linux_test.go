// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestStatmountLayout holds statmountFixed to struct statmount of
// include/uapi/linux/mount.h (Linux 6.18): the offsets of the fields read
// and the size of the fixed part, after which the strings start.
func TestStatmountLayout(t *testing.T) {
	var sm statmountFixed
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"mnt_opts", unsafe.Offsetof(sm.mntOpts), 4},
		{"mask", unsafe.Offsetof(sm.mask), 8},
		{"sb_dev_major", unsafe.Offsetof(sm.sbDevMajor), 16},
		{"sb_flags", unsafe.Offsetof(sm.sbFlags), 32},
		{"fs_type", unsafe.Offsetof(sm.fsType), 36},
		{"mnt_id", unsafe.Offsetof(sm.mntID), 40},
		{"mnt_parent_id", unsafe.Offsetof(sm.mntParentID), 48},
		{"mnt_id_old", unsafe.Offsetof(sm.mntIDOld), 56},
		{"mnt_parent_id_old", unsafe.Offsetof(sm.mntParentIDOld), 60},
		{"mnt_attr", unsafe.Offsetof(sm.mntAttr), 64},
		{"mnt_propagation", unsafe.Offsetof(sm.mntPropagation), 72},
		{"mnt_peer_group", unsafe.Offsetof(sm.mntPeerGroup), 80},
		{"mnt_master", unsafe.Offsetof(sm.mntMaster), 88},
		{"mnt_root", unsafe.Offsetof(sm.mntRoot), 104},
		{"mnt_point", unsafe.Offsetof(sm.mntPoint), 108},
		{"mnt_ns_id", unsafe.Offsetof(sm.mntNsID), 112},
		{"fs_subtype", unsafe.Offsetof(sm.fsSubtype), 120},
		{"sb_source", unsafe.Offsetof(sm.sbSource), 124},
		{"supported_mask", unsafe.Offsetof(sm.supportedMask), 144},
		{"__spare2", unsafe.Offsetof(sm.spare2), 168},
		{"str (sizeof)", unsafe.Sizeof(sm), 512},
		{"mnt_id_req (sizeof)", unsafe.Sizeof(mntIDReq{}), unix.MNT_ID_REQ_SIZE_VER1},
		{"mnt_id_req.mnt_ns_id", unsafe.Offsetof(mntIDReq{}.mntNsID), unix.MNT_ID_REQ_SIZE_VER0},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, want %d", f.name, f.got, f.want)
		}
	}
}

// TestMountOptions spells mount attributes as show_mnt_opts does.
func TestMountOptions(t *testing.T) {
	for _, tc := range []struct {
		attr uint64
		want string
	}{
		{unix.MOUNT_ATTR_RELATIME, "rw,relatime"},
		{unix.MOUNT_ATTR_STRICTATIME, "rw"},
		{unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_NOATIME, "ro,nosuid,nodev,noexec,noatime"},
		{unix.MOUNT_ATTR_NODIRATIME | unix.MOUNT_ATTR_NOSYMFOLLOW | unix.MOUNT_ATTR_STRICTATIME, "rw,nodiratime,nosymfollow"},
	} {
		if got := mountOptions(tc.attr); got != tc.want {
			t.Errorf("mountOptions(%#x) = %q, want %q", tc.attr, got, tc.want)
		}
	}
	for _, tc := range []struct {
		flags uint32
		fs    string
		want  string
	}{
		{0, "", "rw"},
		{sbRdonly, "errors=remount-ro", "ro,errors=remount-ro"},
		{sbSynchronous | sbDirsync | sbLazytime, "size=1024k", "rw,sync,dirsync,lazytime,size=1024k"},
	} {
		if got := superOptions(tc.flags, tc.fs); got != tc.want {
			t.Errorf("superOptions(%#x, %q) = %q, want %q", tc.flags, tc.fs, got, tc.want)
		}
	}
}

// beneathNode is a directory (hp, a launcher's hotplug-disks) on a
// filesystem of its own, beside a volume with a disk.img to bind.
type beneathNode struct {
	hp, vol string
}

func newBeneathNode(t *testing.T) beneathNode {
	testutil.RequiresRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	n := beneathNode{hp: filepath.Join(base, "pod", "hotplug-disks"), vol: filepath.Join(base, "vol")}
	must(t, os.MkdirAll(filepath.Dir(n.hp), 0o755))
	testutil.NewFilesystem(t, "ext4", 16<<20, filepath.Dir(n.hp))
	must(t, os.Mkdir(n.hp, 0o750))
	testutil.NewFilesystem(t, "ext4", 16<<20, n.vol)
	must(t, os.WriteFile(filepath.Join(n.vol, "disk.img"), nil, 0o644))
	return n
}

// target creates an empty file hp/name to bind onto and returns its path.
func (n beneathNode) target(t *testing.T, name string) string {
	p := filepath.Join(n.hp, name)
	must(t, os.WriteFile(p, nil, 0o660))
	return p
}

func mountOn(t *testing.T, src, dst, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		t.Fatalf("mount %q on %q: %v", src, dst, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

func set(t *testing.T, dst string, flags uintptr) {
	t.Helper()
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		t.Fatalf("propagation of %q: %v", dst, err)
	}
}

// TestReadBeneathMatchesTable builds a node's worth of what can be on a
// launcher's hotplug-disks and holds ReadBeneath to ReadTable entry by
// entry: every mount it returns is the table's, field for field (the
// unique ids aside, which mountinfo does not show), and for every entry of
// the directory both show the same stack, bottom first.
func TestReadBeneathMatchesTable(t *testing.T) {
	img := func(n beneathNode) string { return filepath.Join(n.vol, "disk.img") }
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, n beneathNode)
	}{
		{"empty", func(t *testing.T, n beneathNode) { n.target(t, "none.img") }},
		{"file bind", func(t *testing.T, n beneathNode) {
			mountOn(t, img(n), n.target(t, "a.img"), "", unix.MS_BIND, "")
		}},
		{"stacked binds", func(t *testing.T, n beneathNode) {
			p := n.target(t, "a.img")
			mountOn(t, img(n), p, "", unix.MS_BIND, "")
			mountOn(t, img(n), p, "", unix.MS_BIND, "")
			mountOn(t, img(n), p, "", unix.MS_BIND, "")
		}},
		{"shared, slave, unbindable and private", func(t *testing.T, n beneathNode) {
			shared, slave, unb := n.target(t, "shared.img"), n.target(t, "slave.img"), n.target(t, "unb.img")
			mountOn(t, img(n), shared, "", unix.MS_BIND, "")
			set(t, shared, unix.MS_SHARED)
			mountOn(t, shared, slave, "", unix.MS_BIND, "")
			set(t, slave, unix.MS_SLAVE)
			mountOn(t, img(n), unb, "", unix.MS_BIND, "")
			set(t, unb, unix.MS_UNBINDABLE)
			mountOn(t, img(n), n.target(t, "private.img"), "", unix.MS_BIND, "")
		}},
		{"shared and slave at once", func(t *testing.T, n beneathNode) {
			p, q := n.target(t, "p.img"), n.target(t, "q.img")
			mountOn(t, img(n), p, "", unix.MS_BIND, "")
			set(t, p, unix.MS_SHARED)
			mountOn(t, p, q, "", unix.MS_BIND, "")
			set(t, q, unix.MS_SLAVE)
			set(t, q, unix.MS_SHARED)
		}},
		{"read-only bind with options", func(t *testing.T, n beneathNode) {
			p := n.target(t, "ro.img")
			mountOn(t, img(n), p, "", unix.MS_BIND, "")
			mountOn(t, "", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOATIME, "")
		}},
		{"directory volume and a tmpfs on a directory", func(t *testing.T, n beneathNode) {
			d := filepath.Join(n.hp, "dump")
			must(t, os.Mkdir(d, 0o750))
			mountOn(t, n.vol, d, "", unix.MS_BIND, "")
			e := filepath.Join(n.hp, "scratch dir\\with\ttabs")
			must(t, os.Mkdir(e, 0o750))
			mountOn(t, "my tmpfs", e, "tmpfs", unix.MS_NOSUID|unix.MS_SYNCHRONOUS, "size=1m,mode=0700")
		}},
		{"deleted source", func(t *testing.T, n beneathNode) {
			src := filepath.Join(n.vol, "gone.img")
			must(t, os.WriteFile(src, nil, 0o644))
			mountOn(t, src, n.target(t, "gone.img"), "", unix.MS_BIND, "")
			must(t, os.Remove(src))
		}},
		{"loop detached under its mount", func(t *testing.T, n beneathNode) {
			d := filepath.Join(t.TempDir(), "m")
			l := testutil.NewFilesystem(t, "ext4", 16<<20, d)
			must(t, os.WriteFile(filepath.Join(d, "disk.img"), nil, 0o644))
			mountOn(t, filepath.Join(d, "disk.img"), n.target(t, "loop.img"), "", unix.MS_BIND, "")
			testutil.Run(t, "losetup", "-d", l.Device)
		}},
		{"dead filesystem (xfs shut down)", func(t *testing.T, n beneathNode) {
			d := filepath.Join(t.TempDir(), "x")
			testutil.NewFilesystem(t, "xfs", testutil.MinXFSSize, d)
			must(t, os.WriteFile(filepath.Join(d, "disk.img"), nil, 0o644))
			p := n.target(t, "dead.img")
			mountOn(t, filepath.Join(d, "disk.img"), p, "", unix.MS_BIND, "")
			mountOn(t, filepath.Join(d, "disk.img"), p, "", unix.MS_BIND, "")
			mountOn(t, img(n), n.target(t, "alive.img"), "", unix.MS_BIND, "")
			testutil.Run(t, "xfs_io", "-x", "-c", "shutdown", d)
			var st unix.Stat_t
			if err := unix.Stat(p, &st); !errors.Is(err, unix.EIO) {
				t.Fatalf("stat of the dead target: %v, want EIO", err)
			}
		}},
		{"hotplug-disks a tmpfs of its own", func(t *testing.T, n beneathNode) {
			mountOn(t, "tmpfs", n.hp, "tmpfs", 0, "size=4m")
			mountOn(t, img(n), n.target(t, "a.img"), "", unix.MS_BIND, "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newBeneathNode(t)
			tc.build(t, n)
			compareBeneath(t, n.hp, n.vol)
		})
	}
}

// compareBeneath compares ReadBeneath(hp, also) with the whole table.
func compareBeneath(t *testing.T, hp, also string) {
	t.Helper()
	part, err := ReadBeneath(hp, also)
	must(t, err)
	whole, err := ReadTable("/proc/self/mountinfo")
	must(t, err)
	for _, m := range part.Mounts() {
		if m.UniqueID == 0 {
			t.Errorf("mount %d has no unique id", m.ID)
		}
		w := whole.ByID(m.ID)
		if w == nil {
			t.Errorf("mount %d (%s) is not in the table", m.ID, m.MountPoint)
			continue
		}
		m.UniqueID, m.UniqueParent = 0, 0
		if m != *w {
			t.Errorf("mount %d differs:\nstatmount %+v\nmountinfo %+v", m.ID, m, *w)
		}
	}
	for _, p := range []string{hp, also} {
		if c := part.Containing(p); c == nil || c.ID != whole.Containing(p).ID {
			t.Errorf("mount of %q: %+v, table says %+v", p, c, whole.Containing(p))
		}
	}
	entries, err := os.ReadDir(hp)
	must(t, err)
	for _, e := range entries {
		where := filepath.Join(hp, e.Name())
		if got, want := ids(part.At(where)), ids(whole.At(where)); !slices.Equal(got, want) {
			t.Errorf("stack on %q: %v, table says %v", where, got, want)
		}
	}
}

func ids(stack []*Info) []int {
	var out []int
	for _, m := range stack {
		out = append(out, m.ID)
	}
	return out
}

// TestReadBeneathNoDir: a launcher without hotplug-disks has nothing
// mounted there, and neither has a path through a symlink (a tenant's
// link to a host directory, which the caller's own open then refuses);
// the paths of also are still read.
func TestReadBeneathNoDir(t *testing.T) {
	testutil.RequiresRoot(t)
	base := t.TempDir()
	must(t, os.Mkdir(filepath.Join(base, "host"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "file"), nil, 0o644))
	must(t, os.Symlink(filepath.Join(base, "host"), filepath.Join(base, "link")))
	for _, dir := range []string{"none", "link", "link/below", "file"} {
		part, err := ReadBeneath(filepath.Join(base, dir), "/")
		must(t, err)
		if part.Len() != 1 || part.Containing("/") == nil {
			t.Errorf("ReadBeneath of %q: %+v, want the root mount only", dir, part.Mounts())
		}
	}
}

// TestStatFdMatchesTable: the mount an open file is on, from statmount,
// is the table's entry for it; for a tree of open_tree it is the tree's
// own mount once attached.
func TestStatFdMatchesTable(t *testing.T) {
	n := newBeneathNode(t)
	target := n.target(t, "a.img")
	mountOn(t, filepath.Join(n.vol, "disk.img"), target, "", unix.MS_BIND, "")
	f, err := os.Open(target)
	must(t, err)
	defer f.Close()
	got, err := StatFd(int(f.Fd()))
	must(t, err)
	want, _ := mustTable(t).Top(target)
	if want == nil || got.ID != want.ID || got.Parent != want.Parent || got.Root != want.Root || got.MountPoint != want.MountPoint {
		t.Fatalf("StatFd = %+v, table %+v", got, want)
	}
}

func mustTable(t *testing.T) *Table {
	t.Helper()
	tbl, err := ReadTable("/proc/self/mountinfo")
	must(t, err)
	return tbl
}

// TestReadBeneathRacingUnmount: a mount unmounted between the statx that
// named it and its statmount (virt-handler unplugging while the engine
// looks) is read again, not a failed read of the whole launcher.
func TestReadBeneathRacingUnmount(t *testing.T) {
	n := newBeneathNode(t)
	p := n.target(t, "a.img")
	mountOn(t, filepath.Join(n.vol, "disk.img"), p, "", unix.MS_BIND, "")
	mountOn(t, filepath.Join(n.vol, "disk.img"), p, "", unix.MS_BIND, "")
	raced := 0
	afterLookup = func(name string) {
		if name == "a.img" && raced == 0 {
			raced++
			must(t, unix.Unmount(p, 0))
		}
	}
	t.Cleanup(func() { afterLookup = nil })
	compareBeneath(t, n.hp, n.vol)
	if raced != 1 {
		t.Fatal("the unmount never raced the read")
	}
}

// TestDeadEntryReadsItsStackOnly reads a launcher's directory with one
// entry whose filesystem is shut down, beside a few hundred other mounts
// on the same parent mount. The dead entry's mounts are found by name
// (name_to_handle_at), not by listing the parent's mounts, which
// listmount(2) gives as a whole subtree: on the pods directory's mount,
// the node's. The listing's way, for kernels before 6.12, must still give
// the table's answer.
func TestDeadEntryReadsItsStackOnly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		byHandle bool
	}{{"by name", true}, {"by listing, before Linux 6.12", false}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newBeneathNode(t)
			const others = 300
			for i := range others {
				d := filepath.Join(filepath.Dir(n.hp), "other", strconv.Itoa(i))
				must(t, os.MkdirAll(d, 0o755))
				mountOn(t, "tmpfs", d, "tmpfs", 0, "size=64k")
			}
			d := filepath.Join(t.TempDir(), "x")
			testutil.NewFilesystem(t, "xfs", testutil.MinXFSSize, d)
			must(t, os.WriteFile(filepath.Join(d, "disk.img"), nil, 0o644))
			p := n.target(t, "dead.img")
			mountOn(t, filepath.Join(d, "disk.img"), p, "", unix.MS_BIND, "")
			mountOn(t, filepath.Join(d, "disk.img"), p, "", unix.MS_BIND, "")
			testutil.Run(t, "xfs_io", "-x", "-c", "shutdown", d)
			if !tc.byHandle {
				handleMountID = func(int, string) (uint64, error) { return 0, unix.EINVAL }
				t.Cleanup(func() { handleMountID = nameToHandleMountID })
			}
			var calls int
			onStatmount = func() { calls++ }
			_, err := ReadBeneath(n.hp, n.vol)
			onStatmount = nil
			must(t, err)
			t.Logf("%d statmount calls beside %d other mounts", calls, others)
			if tc.byHandle && calls > 10 {
				t.Errorf("%d statmount calls for a directory of one dead entry: the node's mounts were read", calls)
			}
			compareBeneath(t, n.hp, n.vol)
		})
	}
}
