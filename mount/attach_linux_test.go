// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

const (
	hpVolDir  = "pods/0a1b-hp/volumes/kubernetes.io~csi/pvc-a/mount"
	launchDir = "pods/9f8e-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks"
)

// node is a kubelet tree in a temp dir: a shared kubelet root, a PVC of
// fstype published for the attachment pod with a disk.img, and a launcher's
// hotplug-disks directory.
type node struct {
	base, root string
	loop       *testutil.Loop
	a          *Attacher
}

func newNode(t testing.TB, fstype string) *node {
	t.Helper()
	testutil.RequiresRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	n := &node{base: base, root: filepath.Join(base, "kubelet")}
	must(t, os.MkdirAll(n.root, 0o755))
	testutil.MakeShared(t, n.root)
	size := int64(64 << 20)
	if fstype == "xfs" {
		size = testutil.MinXFSSize
	}
	n.loop = testutil.NewFilesystem(t, fstype, size, n.path(hpVolDir))
	must(t, os.WriteFile(n.path(hpVolDir, "disk.img"), nil, 0o644))
	must(t, os.Truncate(n.path(hpVolDir, "disk.img"), 16<<20))
	must(t, os.MkdirAll(n.path(launchDir), 0o777))
	ns, err := isolation.OpenMountNamespace("/proc/self/ns/mnt")
	must(t, err)
	t.Cleanup(ns.Close)
	n.a = &Attacher{NS: ns, KubeletRoot: n.root}
	return n
}

func (n *node) path(rel ...string) string {
	return filepath.Join(append([]string{n.root}, rel...)...)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// listFiles and listDirs are the listers the tests hand Observe and
// ObserveDirs: the entries named as file targets (*.img), and every entry,
// sorted by name. The agent's own listers are the kubelet package's.
func listFiles(dir *os.File) ([]fs.DirEntry, error) {
	all, err := listDirs(dir)
	return slices.DeleteFunc(all, func(e fs.DirEntry) bool { return !strings.HasSuffix(e.Name(), ".img") }), err
}

func listDirs(dir *os.File) ([]fs.DirEntry, error) {
	all, err := dir.ReadDir(-1)
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return all, err
}

func hostTable(t testing.TB) *mountinfo.Table {
	t.Helper()
	tbl, err := mountinfo.ReadTable("/proc/self/mountinfo")
	must(t, err)
	return tbl
}

// wantSingleBind checks that exactly one mount, of the node's disk.img, is
// on the target, owned by QEMU, and returns its id.
func (n *node) wantSingleBind(t *testing.T, name string) int {
	t.Helper()
	target := n.path(launchDir, name+".img")
	stack := hostTable(t).At(target)
	if len(stack) != 1 {
		t.Fatalf("%d mounts on %q, want 1", len(stack), target)
	}
	m := stack[0]
	dev := n.loop.Dev(t)
	if m.Root != "/disk.img" || m.Major != unix.Major(dev) || m.Minor != unix.Minor(dev) {
		t.Fatalf("mount on %q is %s[%s], want %d:%d[/disk.img]", target, m.Dev(), m.Root, unix.Major(dev), unix.Minor(dev))
	}
	var st unix.Stat_t
	must(t, unix.Stat(target, &st))
	if st.Uid != DefaultQEMUID || st.Gid != DefaultQEMUID {
		t.Fatalf("%q owned by %d:%d, want 107:107", target, st.Uid, st.Gid)
	}
	return m.ID
}

func withFallback(t testing.TB, fallback bool) {
	old := openTreeMissing.Load()
	openTreeMissing.Store(fallback)
	t.Cleanup(func() { openTreeMissing.Store(old) })
}

func TestAttachLifecycle(t *testing.T) {
	for _, fstype := range []string{"ext4", "xfs"} {
		for _, mode := range []struct {
			name     string
			fallback bool
		}{{"open_tree", false}, {"mount(2)", true}} {
			t.Run(fstype+"/"+mode.name, func(t *testing.T) {
				withFallback(t, mode.fallback)
				n := newNode(t, fstype)
				// The launcher exists before the volume is attached, as in
				// a hotplug: the mount must propagate into it.
				l := testutil.StartLauncher(t)
				target := n.path(launchDir, "vol-a.img")

				res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "vol-a.img")
				if err != nil || res != outcome.Mounted {
					t.Fatalf("attach: %v %v, want Mounted", res, err)
				}
				id := n.wantSingleBind(t, "vol-a")
				if openTreeMissing.Load() != mode.fallback {
					t.Fatalf("open_tree missing = %v after attach", openTreeMissing.Load())
				}

				res, err = n.a.Attach(hostTable(t), hpVolDir, launchDir, "vol-a.img")
				if err != nil || res != outcome.Unchanged {
					t.Fatalf("attach again: %v %v, want Unchanged", res, err)
				}
				if again := n.wantSingleBind(t, "vol-a"); again != id {
					t.Fatalf("attach again replaced mount %d by %d", id, again)
				}

				// Data written by the launcher lands in the PVC's disk.img,
				// and the other way round.
				l.Exec(t, fmt.Sprintf("printf from-launcher | dd of=%q bs=1 seek=4096 conv=notrunc 2>/dev/null", target))
				got := make([]byte, len("from-launcher"))
				img, err := os.OpenFile(n.path(hpVolDir, "disk.img"), os.O_RDWR, 0)
				must(t, err)
				defer img.Close()
				_, err = img.ReadAt(got, 4096)
				must(t, err)
				if string(got) != "from-launcher" {
					t.Fatalf("disk.img at 4096 = %q, want from-launcher", got)
				}
				_, err = img.WriteAt([]byte("from-host"), 8192)
				must(t, err)
				out := l.Exec(t, fmt.Sprintf("dd if=%q bs=1 skip=8192 count=9 2>/dev/null", target))
				if out != "from-host" {
					t.Fatalf("launcher read %q from %q, want from-host", out, target)
				}
				if c := strings.Count(l.MountInfo(t), " "+target+" "); c != 1 {
					t.Fatalf("launcher sees %d mounts on %q, want 1", c, target)
				}

				obs, err := n.a.Observe(hostTable(t), launchDir, listFiles)
				must(t, err)
				dev := n.loop.Dev(t)
				want := Observed{Name: "vol-a.img", Mounted: true, Depth: 1, MountID: id,
					Dev: fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)), Root: "/disk.img"}
				if len(obs) != 1 || obs[0] != want {
					t.Fatalf("observe: %+v, want [%+v]", obs, want)
				}

				// A process on the host holding the target open makes a
				// plain unmount fail with EBUSY: Detach detaches lazily.
				busy, err := os.Open(target)
				must(t, err)
				defer busy.Close()
				res, err = n.a.Detach(hostTable(t), launchDir, "vol-a.img")
				if err != nil || res != outcome.Removed {
					t.Fatalf("detach: %v %v, want Removed", res, err)
				}
				if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("target %q still there after detach: %v", target, err)
				}
				if s := hostTable(t).At(target); len(s) != 0 {
					t.Fatalf("%d mounts left on %q", len(s), target)
				}
				if c := strings.Count(l.MountInfo(t), " "+target+" "); c != 0 {
					t.Fatalf("launcher still sees %d mounts on %q", c, target)
				}
				if _, err := os.Stat(n.path(hpVolDir, "disk.img")); err != nil {
					t.Fatalf("disk.img gone after detach: %v", err)
				}
				res, err = n.a.Detach(hostTable(t), launchDir, "vol-a.img")
				if err != nil || res != outcome.Unchanged {
					t.Fatalf("detach again: %v %v, want Unchanged", res, err)
				}
				obs, err = n.a.Observe(hostTable(t), launchDir, listFiles)
				if err != nil || len(obs) != 0 {
					t.Fatalf("observe after detach: %+v %v", obs, err)
				}
			})
		}
	}
}

// TestAttachRepairsLeftovers starts from targets a crashed agent, or the
// built-in mounter, could have left behind.
func TestAttachRepairsLeftovers(t *testing.T) {
	n := newNode(t, "ext4")
	other := filepath.Join(n.base, "other")
	must(t, os.MkdirAll(other, 0o755))
	must(t, unix.Mount("hpmount-test", other, "tmpfs", 0, ""))
	t.Cleanup(func() { _ = unix.Unmount(other, unix.MNT_DETACH) })
	must(t, os.WriteFile(filepath.Join(other, "disk.img"), []byte("foreign"), 0o644))

	bind := func(t *testing.T, src, dst string) {
		t.Helper()
		must(t, unix.Mount(src, dst, "", unix.MS_BIND, ""))
	}
	// A bind of disk.img is a peer of the PVC's shared mount: a mount
	// stacked on it would propagate back onto disk.img itself. The stacks
	// below are built on a private first layer so that only the target has
	// them.
	bindPrivate := func(t *testing.T, src, dst string) {
		t.Helper()
		bind(t, src, dst)
		must(t, unix.Mount("", dst, "", unix.MS_PRIVATE, ""))
	}
	disk := n.path(hpVolDir, "disk.img")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, target string)
		want  outcome.Result
		// observed before the repair
		wantDepth      int
		wantSourceGone bool
	}{
		{"unmounted file", func(t *testing.T, target string) {
			must(t, os.WriteFile(target, nil, 0o600))
		}, outcome.Mounted, 0, false},
		{"deleted source", func(t *testing.T, target string) {
			old := n.path(hpVolDir, "old.img")
			must(t, os.WriteFile(old, nil, 0o644))
			must(t, os.WriteFile(target, nil, 0o600))
			bind(t, old, target)
			must(t, os.Remove(old))
		}, outcome.Replaced, 1, true},
		{"other filesystem", func(t *testing.T, target string) {
			must(t, os.WriteFile(target, nil, 0o600))
			bind(t, filepath.Join(other, "disk.img"), target)
		}, outcome.Replaced, 1, false},
		{"two stacked", func(t *testing.T, target string) {
			must(t, os.WriteFile(target, nil, 0o600))
			bindPrivate(t, disk, target)
			bind(t, disk, target)
		}, outcome.Replaced, 2, false},
		{"right source under a wrong one", func(t *testing.T, target string) {
			must(t, os.WriteFile(target, nil, 0o600))
			bindPrivate(t, disk, target)
			bind(t, filepath.Join(other, "disk.img"), target)
		}, outcome.Replaced, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			target := n.path(launchDir, name+".img")
			tc.setup(t, target)
			obs, err := n.a.Observe(hostTable(t), launchDir, listFiles)
			must(t, err)
			o := findObserved(obs, name+".img")
			if o == nil || o.Depth != tc.wantDepth || o.Stacked != (tc.wantDepth > 1) || o.SourceGone != tc.wantSourceGone {
				t.Fatalf("observe %q before repair: %+v, want depth %d, source gone %v", name, o, tc.wantDepth, tc.wantSourceGone)
			}
			res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, name+".img")
			if err != nil || res != tc.want {
				t.Fatalf("attach: %v %v, want %v", res, err, tc.want)
			}
			n.wantSingleBind(t, name)
			res, err = n.a.Attach(hostTable(t), hpVolDir, launchDir, name+".img")
			if err != nil || res != outcome.Unchanged {
				t.Fatalf("attach after repair: %v %v, want Unchanged", res, err)
			}
			_, err = n.a.Detach(hostTable(t), launchDir, name+".img")
			must(t, err)
		})
	}
	// The foreign file mounted elsewhere was only unmounted, never touched.
	if b, _ := os.ReadFile(filepath.Join(other, "disk.img")); string(b) != "foreign" {
		t.Fatalf("foreign disk.img changed: %q", b)
	}
}

func findObserved(obs []Observed, name string) *Observed {
	for k := range obs {
		if obs[k].Name == name {
			return &obs[k]
		}
	}
	return nil
}

func TestObserveSourceGoneBySysfs(t *testing.T) {
	n := newNode(t, "ext4")
	_, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "v.img")
	must(t, err)
	obs, err := n.a.Observe(hostTable(t), launchDir, listFiles)
	must(t, err)
	if len(obs) != 1 || obs[0].SourceGone {
		t.Fatalf("observe with real /sys: %+v", obs)
	}
	// A sysfs without the loop device's entry: the device is gone.
	n.a.SysRoot = t.TempDir()
	obs, err = n.a.Observe(hostTable(t), launchDir, listFiles)
	must(t, err)
	if len(obs) != 1 || !obs[0].SourceGone {
		t.Fatalf("observe with empty sysfs: %+v, want source gone", obs)
	}
	if obs, err := n.a.Observe(hostTable(t), "pods/none/volumes/kubernetes.io~empty-dir/hotplug-disks", listFiles); err != nil || obs != nil {
		t.Fatalf("observe missing dir: %+v %v", obs, err)
	}
}

// TestAttachRefuses sets every trap a tenant (or a confused node) can lay in
// a PVC or a pod directory. Each refusal must name the path, wrap
// ErrUnsafePath, and mount or create nothing.
func TestAttachRefuses(t *testing.T) {
	n := newNode(t, "ext4")
	secret := filepath.Join(n.base, "host-secret")
	must(t, os.WriteFile(secret, []byte("secret"), 0o600))
	hostDir := filepath.Join(n.base, "host-dir")
	must(t, os.MkdirAll(filepath.Join(hostDir, "mount"), 0o755))
	must(t, os.WriteFile(filepath.Join(hostDir, "disk.img"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(hostDir, "mount", "disk.img"), nil, 0o644))

	vol := func(name string) string { return "pods/0a1b-hp/volumes/kubernetes.io~csi/" + name + "/mount" }
	mkvol := func(t *testing.T, name string) string {
		t.Helper()
		must(t, os.MkdirAll(n.path(vol(name)), 0o755))
		return n.path(vol(name), "disk.img")
	}
	loopDev := n.loop.Dev(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (sourceDir string)
	}{
		{"symlink-to-host-file", func(t *testing.T) string {
			must(t, os.Symlink(secret, mkvol(t, "symlink-to-host-file")))
			return vol("symlink-to-host-file")
		}},
		{"symlink-up", func(t *testing.T) string {
			must(t, os.Symlink("..", mkvol(t, "symlink-up")))
			return vol("symlink-up")
		}},
		{"volume-dir-symlink", func(t *testing.T) string {
			must(t, os.MkdirAll(n.path(vol("volume-dir-symlink"), ".."), 0o755))
			must(t, os.Symlink(hostDir, n.path(vol("volume-dir-symlink"))))
			return vol("volume-dir-symlink")
		}},
		{"pv-dir-symlink", func(t *testing.T) string {
			must(t, os.Symlink(hostDir, n.path(vol("pv-dir-symlink"), "..")))
			return vol("pv-dir-symlink")
		}},
		{"block-device", func(t *testing.T) string {
			must(t, unix.Mknod(mkvol(t, "block-device"), unix.S_IFBLK|0o600, int(loopDev)))
			return vol("block-device")
		}},
		{"char-device", func(t *testing.T) string {
			must(t, unix.Mknod(mkvol(t, "char-device"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
			return vol("char-device")
		}},
		{"fifo", func(t *testing.T) string {
			must(t, unix.Mkfifo(mkvol(t, "fifo"), 0o600))
			return vol("fifo")
		}},
		{"socket", func(t *testing.T) string {
			must(t, unix.Mknod(mkvol(t, "socket"), unix.S_IFSOCK|0o600, 0))
			return vol("socket")
		}},
		{"hard-link", func(t *testing.T) string {
			// Hard links stay within one mount: link a file of the volume's
			// filesystem that lies outside the volume directory.
			out := n.path("pods/0a1b-hp/volumes/kubernetes.io~csi/outside-file")
			must(t, os.WriteFile(out, []byte("not the volume"), 0o600))
			must(t, os.Link(out, mkvol(t, "hard-link")))
			return vol("hard-link")
		}},
		{"bind-of-host-file", func(t *testing.T) string {
			img := mkvol(t, "bind-of-host-file")
			must(t, os.WriteFile(img, nil, 0o644))
			must(t, unix.Mount(secret, img, "", unix.MS_BIND, ""))
			t.Cleanup(func() { _ = unix.Unmount(img, unix.MNT_DETACH) })
			return vol("bind-of-host-file")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.setup(t)
			before := hostTable(t).Len()
			// diag's look at the source refuses what Attach refuses.
			if _, err := n.a.CheckImage(hostTable(t), src); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Errorf("check image: %v, want a refusal wrapping ErrUnsafePath", err)
			}
			res, err := n.a.Attach(hostTable(t), src, launchDir, tc.name+".img")
			n.wantRefused(t, res, err, tc.name, before)
			if _, err := os.Lstat(n.path(launchDir, tc.name+".img")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("refused attach created the target: %v", err)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Fatalf("host file changed: %q", b)
	}

	t.Run("hostile names", func(t *testing.T) {
		for _, name := range []string{"a/b", "..", ".", "", "x\x00y", strings.Repeat("a", 300)} {
			before := hostTable(t).Len()
			res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, name)
			n.wantRefused(t, res, err, launchDir, before)
			res, err = n.a.Detach(hostTable(t), launchDir, name)
			n.wantRefused(t, res, err, launchDir, before)
		}
		entries, err := os.ReadDir(n.path(launchDir))
		must(t, err)
		if len(entries) != 0 {
			t.Fatalf("hostile names created %v", entries)
		}
	})

	t.Run("target dir symlink", func(t *testing.T) {
		hp := "pods/evil/volumes/kubernetes.io~empty-dir/hotplug-disks"
		must(t, os.MkdirAll(n.path(hp, ".."), 0o755))
		victim := filepath.Join(n.base, "victim-dir")
		must(t, os.Mkdir(victim, 0o755))
		must(t, os.Symlink(victim, n.path(hp)))
		before := hostTable(t).Len()
		res, err := n.a.Attach(hostTable(t), hpVolDir, hp, "v.img")
		n.wantRefused(t, res, err, hp, before)
		if entries, _ := os.ReadDir(victim); len(entries) != 0 {
			t.Fatalf("refused attach wrote into %q: %v", victim, entries)
		}
	})

	t.Run("target symlink", func(t *testing.T) {
		link := n.path(launchDir, "link.img")
		must(t, os.Symlink(secret, link))
		before := hostTable(t).Len()
		n.wantRefused(t, "", n.a.CheckTarget(hostTable(t), launchDir, "link.img"), "link.img", before)
		res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "link.img")
		n.wantRefused(t, res, err, "link.img", before)
		if s := hostTable(t).At(secret); len(s) != 0 {
			t.Fatalf("attach mounted over the link's target %q", secret)
		}
		res, err = n.a.Detach(hostTable(t), launchDir, "link.img")
		n.wantRefused(t, res, err, "link.img", before)
		if _, err := os.Lstat(link); err != nil {
			t.Fatalf("refused detach removed the symlink: %v", err)
		}
		if _, err := os.Stat(secret); err != nil {
			t.Fatalf("refused detach removed the link's target: %v", err)
		}
	})

	t.Run("target directory", func(t *testing.T) {
		must(t, os.Mkdir(n.path(launchDir, "dir.img"), 0o755))
		before := hostTable(t).Len()
		n.wantRefused(t, "", n.a.CheckTarget(hostTable(t), launchDir, "dir.img"), "dir.img", before)
		res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "dir.img")
		n.wantRefused(t, res, err, "dir.img", before)
		obs, err := n.a.Observe(hostTable(t), launchDir, listFiles)
		must(t, err)
		if len(obs) != 0 {
			t.Fatalf("observe reported non-files: %+v", obs)
		}
	})
}

func (n *node) wantRefused(t *testing.T, res outcome.Result, err error, mention string, mountsBefore int) {
	t.Helper()
	if !errors.Is(err, isolation.ErrUnsafePath) {
		t.Fatalf("got %v, %v; want a refusal wrapping ErrUnsafePath", res, err)
	}
	if !strings.Contains(err.Error(), mention) {
		t.Fatalf("refusal %q does not name %q", err, mention)
	}
	t.Logf("refused: %v", err)
	if res != "" {
		t.Fatalf("refusal reported result %q", res)
	}
	if after := hostTable(t).Len(); after != mountsBefore {
		t.Fatalf("refusal changed the mount table: %d mounts, had %d", after, mountsBefore)
	}
}

// BenchmarkAttach compares the no-op path (target already carries the
// right mount: lookups and stats only, no mount syscall) with a fresh attach
// followed by a detach.
func BenchmarkAttach(b *testing.B) {
	n := newNode(b, "ext4")
	b.Run("already-attached", func(b *testing.B) {
		_, err := n.a.Attach(hostTable(b), hpVolDir, launchDir, "bench.img")
		must(b, err)
		tbl := hostTable(b)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			res, err := n.a.Attach(tbl, hpVolDir, launchDir, "bench.img")
			if err != nil || res != outcome.Unchanged {
				b.Fatalf("%v %v", res, err)
			}
		}
		b.StopTimer()
		_, err = n.a.Detach(hostTable(b), launchDir, "bench.img")
		must(b, err)
	})
	b.Run("already-attached/caller-namespace", func(b *testing.B) {
		// The same no-op without the hop to the namespace thread, to show
		// what the hop costs.
		direct := *n.a
		direct.NS = nil
		_, err := direct.Attach(hostTable(b), hpVolDir, launchDir, "bench.img")
		must(b, err)
		tbl := hostTable(b)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if res, err := direct.Attach(tbl, hpVolDir, launchDir, "bench.img"); err != nil || res != outcome.Unchanged {
				b.Fatalf("%v %v", res, err)
			}
		}
		b.StopTimer()
		_, err = direct.Detach(hostTable(b), launchDir, "bench.img")
		must(b, err)
	})
	b.Run("attach+detach", func(b *testing.B) {
		tbl := hostTable(b)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if res, err := n.a.Attach(tbl, hpVolDir, launchDir, "bench.img"); err != nil || res != outcome.Mounted {
				b.Fatalf("attach: %v %v", res, err)
			}
			if res, err := n.a.Detach(tbl, launchDir, "bench.img"); err != nil || res != outcome.Removed {
				b.Fatalf("detach: %v %v", res, err)
			}
		}
	})
}

// TestDeadSourceIsObservedAndDetached: the filesystem under a launcher's
// bind is shut down (xfs_io shutdown, as when its device or server is gone).
// Every stat of the target then fails with EIO; the target is still
// observed, as a dead mount, and the volume can still be unplugged, instead
// of failing every reconcile of its VMI and every diag of the node.
func TestDeadSourceIsObservedAndDetached(t *testing.T) {
	n := newNode(t, "xfs")
	_, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "dead.img")
	must(t, err)
	testutil.Run(t, "xfs_io", "-x", "-c", "shutdown", n.path(hpVolDir))
	var st unix.Stat_t
	if err := unix.Stat(n.path(launchDir, "dead.img"), &st); !errors.Is(err, unix.EIO) {
		t.Fatalf("stat of the target after the shutdown = %v, want EIO", err)
	}
	obs, err := n.a.Observe(hostTable(t), launchDir, listFiles)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	if len(obs) != 1 || !obs[0].Mounted || !obs[0].SourceGone || obs[0].Name != "dead.img" {
		t.Fatalf("observed %+v, want the dead mount of dead.img", obs)
	}
	res, err := n.a.Detach(hostTable(t), launchDir, "dead.img")
	if err != nil || res != outcome.Removed {
		t.Fatalf("detach = %v, %v; want removed", res, err)
	}
	if _, err := os.Lstat(n.path(launchDir, "dead.img")); !os.IsNotExist(err) {
		t.Fatalf("target still there: %v", err)
	}
}

// TestWithLauncherDirLooksAsAlone: through WithLauncherDir, Observe,
// ObserveDirs, OpenBound and InLauncherDir find what each finds alone,
// each from the start of the directory however many looks came before;
// a missing directory leaves each look to find nothing, as alone.
func TestWithLauncherDirLooksAsAlone(t *testing.T) {
	n := newNode(t, "ext4")
	_, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "v.img")
	must(t, err)
	must(t, os.Mkdir(n.path(launchDir, "other"), 0o755))
	here := *n.a
	here.NS = nil // WithLauncherDir runs on the caller's thread
	look := func(a *Attacher, dir string) string {
		tbl := hostTable(t)
		files, ferr := a.Observe(tbl, dir, listFiles)
		dirs, derr := a.ObserveDirs(tbl, dir, listDirs)
		bound, berr := a.OpenBound(tbl, dir, []string{"v.img"})
		for _, f := range bound {
			f.Close()
		}
		names, nerr := InLauncherDir(a, tbl, dir, func(d *os.File) ([]string, error) { return d.Readdirnames(-1) })
		slices.Sort(names)
		return fmt.Sprintf("files %v %v; dirs %v %v; bound %d %v; names %v %v",
			files, ferr, dirs, derr, len(bound), berr, names, errors.Is(nerr, fs.ErrNotExist))
	}
	for _, dir := range []string{launchDir, "pods/none/volumes/kubernetes.io~empty-dir/hotplug-disks"} {
		alone := look(&here, dir)
		var held []string
		must(t, here.WithLauncherDir(hostTable(t), dir, func(a *Attacher) error {
			held = append(held, look(a, dir), look(a, dir))
			return nil
		}))
		for k, got := range held {
			if got != alone {
				t.Errorf("%s, look %d through WithLauncherDir:\n%s\nalone:\n%s", dir, k+1, got, alone)
			}
		}
	}
}
