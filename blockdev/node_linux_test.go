// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/outcome"
)

const (
	hpPod      = "11111111-hp"
	launcher   = "22222222-launcher"
	pvName     = "pvc-block-1"
	targetRel  = "pods/" + launcher + "/volumes/kubernetes.io~empty-dir/hotplug-disks"
	devicesRel = "pods/" + hpPod + "/volumeDevices/kubernetes.io~csi"
)

// nodeFixture is a kubelet root with one block volume published for the
// attachment pod, as the kubelet and a CSI driver leave it.
type nodeFixture struct {
	root  string
	loop  *testutil.Loop
	nodes *Nodes
}

func newNodeFixture(t *testing.T) *nodeFixture {
	t.Helper()
	testutil.RequiresRoot(t)
	root := t.TempDir()
	testutil.MakeShared(t, root)
	f := &nodeFixture{root: root, loop: testutil.NewLoop(t, 16<<20)}
	for _, d := range []string{targetRel, devicesRel} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.publish(t, f.loop.Device)
	ns, err := isolation.OpenMountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	f.nodes = &Nodes{NS: ns, Root: kubelet.Root{Path: root, Configured: root}, UID: 107, GID: 107}
	return f
}

// dir opens the launcher's hotplug-disks as the engine hands it to Nodes
// (there through mount.InLauncherDir). Each call opens it anew: a listing
// reads a descriptor to its end.
func (f *nodeFixture) dir(t *testing.T) *os.File {
	t.Helper()
	root, err := isolation.OpenRoot(f.root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	d, err := isolation.OpenBeneath(root, targetRel, isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// publish does what the CSI driver and kubelet do: bind the device node onto
// a file at the publish path and link the pod's volumeDevices entry to it.
func (f *nodeFixture) publish(t *testing.T, device string) {
	t.Helper()
	pub := filepath.Join(f.root, "plugins/kubernetes.io/csi/volumeDevices/publish", pvName, hpPod)
	if err := os.MkdirAll(filepath.Dir(pub), 0o750); err != nil {
		t.Fatal(err)
	}
	_ = unix.Unmount(pub, unix.MNT_DETACH)
	if err := os.WriteFile(pub, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(device, pub, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s on %q: %v", device, pub, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(pub, unix.MNT_DETACH) })
	link := filepath.Join(f.root, devicesRel, pvName)
	_ = os.Remove(link)
	if err := os.Symlink(pub, link); err != nil {
		t.Fatal(err)
	}
}

func TestNodeLifecycle(t *testing.T) {
	f := newNodeFixture(t)
	l := testutil.StartLauncher(t)
	p, err := f.nodes.PublishedDevice(hpPod, pvName)
	if err != nil {
		t.Fatal(err)
	}
	if p.Device.Major != 7 {
		t.Fatalf("published device %v is not a loop device", p.Device)
	}
	for i, want := range []outcome.Result{outcome.Created, outcome.Unchanged} {
		got, _, err := f.nodes.Ensure(f.dir(t), "vol", p)
		if err != nil || got != want {
			t.Fatalf("ensure #%d = %s, %v; want %s", i+1, got, err, want)
		}
	}
	node := filepath.Join(f.root, targetRel, "vol")
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil || st.Uid != 107 || st.Gid != 107 || st.Mode&0o777 != p.Perm {
		t.Fatalf("node stat %+v %v", st, err)
	}
	// The launcher writes through its own view of the node; the data is on
	// the device.
	l.Exec(t, "printf hpmount-block | dd of="+node+" conv=notrunc status=none")
	got := testutil.Run(t, "dd", "if="+f.loop.Device, "bs=13", "count=1", "status=none")
	if got != "hpmount-block" {
		t.Fatalf("device holds %q", got)
	}
	nodes, err := f.nodes.Observe(f.dir(t))
	if err != nil || len(nodes) != 1 || nodes[0].Device != p.Device {
		t.Fatalf("observe = %+v, %v", nodes, err)
	}

	// Re-published on another device (a new minor): the node follows.
	other := testutil.NewLoop(t, 16<<20)
	f.publish(t, other.Device)
	p2, err := f.nodes.PublishedDevice(hpPod, pvName)
	if err != nil || p2.Device == p.Device {
		t.Fatalf("re-published device %v, %v", p2.Device, err)
	}
	if got, old, err := f.nodes.Ensure(f.dir(t), "vol", p2); err != nil || got != outcome.Replaced || old != p.Device {
		t.Fatalf("ensure after re-publish = %s, %v (old %v)", got, err, old)
	}
	if err := unix.Stat(node, &st); err != nil || unix.Minor(st.Rdev) != p2.Device.Minor {
		t.Fatalf("node points at %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}

	for i, want := range []outcome.Result{outcome.Removed, outcome.Unchanged} {
		got, dev, err := f.nodes.Remove(f.dir(t), "vol")
		if err != nil || got != want {
			t.Fatalf("remove #%d = %s, %v", i+1, got, err)
		}
		if want == outcome.Removed && dev != p2.Device {
			t.Fatalf("removed node was %v", dev)
		}
	}
}

// TestNodeMadeMeanwhile is the race with virt-handler's mounter, which
// makes the same node: it takes the name between Ensure's lookup and its
// mknod. The EEXIST is no error: Ensure judges the peer's node, owns it
// for QEMU, and still reports a stale node it removed itself.
func TestNodeMadeMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stale   bool
		want    outcome.Result
		wantOld bool
	}{
		{"fresh name", false, outcome.Unchanged, false},
		{"stale node removed first", true, outcome.Replaced, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newNodeFixture(t)
			p, err := f.nodes.PublishedDevice(hpPod, pvName)
			if err != nil {
				t.Fatal(err)
			}
			node := filepath.Join(f.root, targetRel, "vol")
			stale := Device{Major: p.Device.Major, Minor: p.Device.Minor + 100}
			if tc.stale {
				if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(stale.Number())); err != nil {
					t.Fatal(err)
				}
			}
			raced := false
			f.nodes.beforeMknod = func(string) {
				if !raced {
					raced = true
					if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(p.Device.Number())); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, old, err := f.nodes.Ensure(f.dir(t), "vol", p)
			if !raced || err != nil || got != tc.want {
				t.Fatalf("ensure = %s, %v (raced %v); want %s", got, err, raced, tc.want)
			}
			if tc.wantOld != (old == stale) {
				t.Errorf("ensure reported old device %v, stale was %v", old, stale)
			}
			var st unix.Stat_t
			if err := unix.Stat(node, &st); err != nil || st.Rdev != p.Device.Number() || st.Uid != 107 || st.Gid != 107 {
				t.Fatalf("node stat %+v %v", st, err)
			}
		})
	}
}

func TestNodeRefusals(t *testing.T) {
	f := newNodeFixture(t)
	p, err := f.nodes.PublishedDevice(hpPod, pvName)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(f.root, targetRel)
	t.Run("existing symlink is not replaced", func(t *testing.T) {
		if err := os.Symlink(outside, filepath.Join(target, "trap")); err != nil {
			t.Fatal(err)
		}
		if err := ensureErr(f.nodes, f.dir(t), "trap", p); !errors.Is(err, isolation.ErrUnsafePath) {
			t.Fatalf("got %v", err)
		}
		if _, _, err := f.nodes.Remove(f.dir(t), "trap"); !errors.Is(err, isolation.ErrUnsafePath) {
			t.Fatalf("remove got %v", err)
		}
		if _, err := os.Lstat(filepath.Join(target, "trap")); err != nil {
			t.Fatal("the tenant's entry was removed")
		}
	})
	for _, name := range []string{"a/b", "..", ".", "", "x\x00y", strings.Repeat("n", 201)} {
		t.Run("name "+name, func(t *testing.T) {
			if err := ensureErr(f.nodes, f.dir(t), name, p); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Fatalf("got %v", err)
			}
		})
	}
	for name, link := range map[string]string{
		"pv-outside": outside,
		"pv-regular": filepath.Join(f.root, "pods", hpPod, "plain"),
		"pv-via-up":  filepath.Join(f.root, "pods", "..", "..", filepath.Base(outside)),
	} {
		t.Run("published "+name, func(t *testing.T) {
			_ = os.WriteFile(filepath.Join(f.root, "pods", hpPod, "plain"), nil, 0o600)
			if err := os.Symlink(link, filepath.Join(f.root, devicesRel, name)); err != nil {
				t.Fatal(err)
			}
			if _, err := f.nodes.PublishedDevice(hpPod, name); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Fatalf("got %v", err)
			}
		})
	}
	t.Run("not published", func(t *testing.T) {
		if _, err := f.nodes.PublishedDevice(hpPod, "pvc-none"); !errors.Is(err, kubelet.ErrNotPublished) {
			t.Fatalf("got %v", err)
		}
		if _, err := f.nodes.PublishedDevice("33333333-gone", pvName); !errors.Is(err, kubelet.ErrNotPublished) {
			t.Fatalf("got %v", err)
		}
	})
}

func ensureErr(n *Nodes, dir *os.File, name string, p Published) error {
	_, _, err := n.Ensure(dir, name, p)
	return err
}

// TestRecheckConfirmsTheDisk: a node made by Ensure carries the sequence
// number of its disk, so a later check, after an agent restart too, tells
// the volume's disk from another that was given the same major:minor.
func TestRecheckConfirmsTheDisk(t *testing.T) {
	f := newNodeFixture(t)
	p, err := f.nodes.PublishedDevice(hpPod, pvName)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.nodes.Ensure(f.dir(t), "vol", p); err != nil {
		t.Fatal(err)
	}
	if dev, err := f.nodes.Recheck(f.dir(t), "vol"); err != nil || dev != p.Device {
		t.Fatalf("recheck = %v, %v; want %v confirmed", dev, err, p.Device)
	}
	// A restarted agent has nothing but the node.
	restarted := &Nodes{NS: f.nodes.NS, Root: f.nodes.Root, UID: 107, GID: 107}
	if dev, err := restarted.Recheck(f.dir(t), "vol"); err != nil || dev != p.Device {
		t.Fatalf("recheck after restart = %v, %v; want %v confirmed", dev, err, p.Device)
	}
	if _, err := f.nodes.Recheck(f.dir(t), "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("recheck of a missing node = %v, want not exist", err)
	}
	// A node nobody recorded (made by hand, or by another tool).
	unrecorded := filepath.Join(f.root, targetRel, "other")
	if err := unix.Mknod(unrecorded, unix.S_IFBLK|0o660, int(f.loop.Dev(t))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.nodes.Recheck(f.dir(t), "other"); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("recheck of an unrecorded node = %v, want ErrUnconfirmed", err)
	}
	// The loop device is detached and its number given to another disk.
	testutil.Run(t, "losetup", "-d", f.loop.Device)
	backing := filepath.Join(t.TempDir(), "other.img")
	if err := os.WriteFile(backing, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Run(t, "losetup", f.loop.Device, backing)
	_, err = f.nodes.Recheck(f.dir(t), "vol")
	if !errors.Is(err, ErrUnconfirmed) || !strings.Contains(err.Error(), "is now disk") {
		t.Fatalf("recheck after the number was reused = %v, want ErrUnconfirmed naming both disks", err)
	}
}

// TestCoveredNodeRefused: a host file, or a host device node of the very
// disk the node is for, bind-mounted on the node's name is what a lookup
// of the name reaches. Ensure, Recheck and Remove refuse it before any
// write, chown, record or unlink, Observe lists the name as covered
// without its device, and so does Look (diag's question); the host file
// keeps owner, mode, attributes and content.
func TestCoveredNodeRefused(t *testing.T) {
	f := newNodeFixture(t)
	p, err := f.nodes.PublishedDevice(hpPod, pvName)
	if err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(hostFile, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	hostNode := filepath.Join(t.TempDir(), "disk")
	if err := unix.Mknod(hostNode, unix.S_IFBLK|0o600, int(f.loop.Dev(t))); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{hostFile, hostNode} {
		t.Run(filepath.Base(host), func(t *testing.T) {
			if _, _, err := f.nodes.Ensure(f.dir(t), "vol", p); err != nil {
				t.Fatal(err)
			}
			if n, err := f.nodes.Look(f.dir(t), "vol"); err != nil || n.Covered || n.Device != p.Device {
				t.Fatalf("look before the bind = %+v, %v; want the node of %s", n, err, p.Device)
			}
			node := filepath.Join(f.root, targetRel, "vol")
			if err := unix.Mount(host, node, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			defer unix.Unmount(node, unix.MNT_DETACH)
			before := facts(t, host)
			if err := ensureErr(f.nodes, f.dir(t), "vol", p); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Errorf("ensure = %v, want unsafe", err)
			}
			if _, err := f.nodes.Recheck(f.dir(t), "vol"); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Errorf("recheck = %v, want unsafe", err)
			}
			if _, _, err := f.nodes.Remove(f.dir(t), "vol"); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Errorf("remove = %v, want unsafe", err)
			}
			if nodes, err := f.nodes.Observe(f.dir(t)); err != nil || len(nodes) != 1 || !nodes[0].Covered || nodes[0].Device != (Device{}) {
				t.Errorf("observe = %+v, %v; want the name covered", nodes, err)
			}
			if n, err := f.nodes.Look(f.dir(t), "vol"); err != nil || !n.Covered || n.Device != (Device{}) {
				t.Errorf("look = %+v, %v; want the name covered", n, err)
			}
			if after := facts(t, host); after != before {
				t.Errorf("host %q changed: %s, was %s", host, after, before)
			}
			if err := unix.Unmount(node, 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := f.nodes.Remove(f.dir(t), "vol"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// facts is what must not change about a host file or node: kind, mode,
// owner, device, extended attributes and content.
func facts(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := unix.Llistxattr(p, buf)
	s := fmt.Sprintf("%o %d:%d rdev %d size %d xattrs %q", st.Mode, st.Uid, st.Gid, st.Rdev, st.Size, buf[:max(n, 0)])
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s += " " + string(b)
	}
	return s
}

// TestLookRefusesWhatIsNoNode: a name that is not there is
// fs.ErrNotExist, not a verdict either way; an entry that is no block
// device is refused as Ensure refuses it, and left as it was.
func TestLookRefusesWhatIsNoNode(t *testing.T) {
	f := newNodeFixture(t)
	if _, err := f.nodes.Look(f.dir(t), "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("look at a missing name: %v, want fs.ErrNotExist", err)
	}
	file := filepath.Join(f.root, targetRel, "file")
	if err := os.WriteFile(file, []byte("tenant"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := facts(t, file)
	if n, err := f.nodes.Look(f.dir(t), "file"); !errors.Is(err, isolation.ErrUnsafePath) {
		t.Errorf("look at a regular file = %+v, %v; want unsafe", n, err)
	}
	if after := facts(t, file); after != before {
		t.Errorf("%q changed: %s, was %s", file, after, before)
	}
}
