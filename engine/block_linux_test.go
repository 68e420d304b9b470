// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// otherLauncher is a second launcher of the node, with its own compute
// container, whose block volume must be served whatever the first one's
// directories hold.
const otherLauncher = types.UID("33333333-launcher")

// blockScene is a node with the linked root's block volume desired in two
// launchers, both compute containers denied every device (a runtime's
// list), and host paths an attack binds into the first launcher.
type blockScene struct {
	*linkedRoot
	e                *Engine
	hostDir, hostImg string
	facts            map[string]string
	mounts           []string
}

func newBlockScene(t *testing.T) *blockScene {
	s := &blockScene{linkedRoot: newLinkedRoot(t)}
	must(t, os.MkdirAll(filepath.Join(s.real, kubelet.HotplugDisksDir(string(otherLauncher))), 0o755))
	pod := filepath.Join(s.cgroupRoot, "kubepods", "pod"+string(otherLauncher))
	must(t, os.MkdirAll(filepath.Join(pod, computeID), 0o755))
	t.Cleanup(func() { _ = unix.Rmdir(filepath.Join(pod, computeID)); _ = unix.Rmdir(pod) })
	for _, l := range []types.UID{launcherUID, otherLauncher} {
		must(t, os.WriteFile(filepath.Join(s.cgroupRoot, "kubepods", "pod"+string(l), computeID, "devices.deny"), []byte("a"), 0))
	}
	host := t.TempDir()
	s.hostDir, s.hostImg = filepath.Join(host, "etc"), filepath.Join(host, "shadow")
	must(t, os.Mkdir(s.hostDir, 0o700))
	must(t, os.WriteFile(filepath.Join(s.hostDir, "passwd"), []byte("root:x:0:0\n"), 0o644))
	must(t, os.WriteFile(s.hostImg, []byte("host secret"), 0o600))
	e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: s.configured,
		CgroupRoot: s.cgroupRoot, CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107})
	must(t, err)
	t.Cleanup(e.Close)
	s.e = e
	return s
}

func blockVolume(launcher types.UID) hotplug.DesiredVolume {
	return hotplug.DesiredVolume{Name: "blk", Mode: kubevirt.Block, LauncherUID: launcher, ComputeContainerID: "containerd://" + computeID,
		Source: hotplug.Source{AttachmentPodUID: attachUID, PVName: "pv-blk"}}
}

// hostFacts is what must not change about a host file, directory or
// device node: kind, mode, owner, size, device number, extended
// attributes, and content (a directory's entries; a device is not read).
func hostFacts(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	facts := fmt.Sprintf("%s %o %d:%d %d rdev %d", isolation.FileKind(st.Mode), st.Mode&0o7777, st.Uid, st.Gid, st.Size, st.Rdev)
	buf := make([]byte, 4096)
	if n, err := unix.Llistxattr(p, buf); err == nil {
		facts += " xattrs " + strings.ReplaceAll(string(buf[:n]), "\x00", ",")
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		entries, err := os.ReadDir(p)
		must(t, err)
		for _, e := range entries {
			facts += " " + e.Name()
		}
	case unix.S_IFREG:
		b, err := os.ReadFile(p)
		must(t, err)
		facts += " " + string(b)
	}
	return facts
}

// mountPoints lists the namespace's mount points.
func mountPoints(t *testing.T) []string {
	t.Helper()
	tb, err := mountinfo.ReadTable("/proc/self/mountinfo")
	must(t, err)
	var points []string
	for _, m := range tb.Mounts() {
		points = append(points, m.MountPoint)
	}
	return points
}

// arm records the facts of the host paths (and of extra ones, such as a
// host device node) and the mounts, once the attack is in place.
func (s *blockScene) arm(t *testing.T, extra ...string) {
	s.facts = map[string]string{}
	for _, p := range append([]string{s.hostDir, s.hostImg, filepath.Join(s.hostDir, "passwd")}, extra...) {
		s.facts[p] = hostFacts(t, p)
	}
	s.mounts = mountPoints(t)
}

// unchanged checks the host paths' facts, and that no mount appeared.
func (s *blockScene) unchanged(t *testing.T) {
	t.Helper()
	for p, was := range s.facts {
		if got := hostFacts(t, p); got != was {
			t.Errorf("host %q changed: %q, was %q", p, got, was)
		}
	}
	for _, m := range mountPoints(t) {
		if !slices.Contains(s.mounts, m) {
			t.Errorf("new mount on %q", m)
		}
	}
}

func (s *blockScene) attach(t *testing.T, v hotplug.DesiredVolume) (outcome.Result, error) {
	t.Helper()
	snap, err := s.e.Snapshot(context.Background())
	must(t, err)
	return s.e.Attach(context.Background(), snap, v)
}

func (s *blockScene) observe(t *testing.T, launcher types.UID) ([]hotplug.ObservedVolume, error) {
	t.Helper()
	snap, err := s.e.Snapshot(context.Background())
	must(t, err)
	return s.e.Observe(context.Background(), snap, launcher)
}

func (s *blockScene) detach(t *testing.T, o hotplug.ObservedVolume) (outcome.Result, error) {
	t.Helper()
	snap, err := s.e.Snapshot(context.Background())
	must(t, err)
	return s.e.Detach(context.Background(), snap, launcherUID, o)
}

// allowed says whether launcher's compute container may use the block
// volume's device.
func (s *blockScene) allowed(t *testing.T, launcher types.UID) bool {
	t.Helper()
	pub := filepath.Join(s.real, kubelet.CSIPublishFile("pv-blk", string(attachUID)))
	ok, err := s.e.rules.Allowed(computeOf(blockVolume(launcher)), deviceOf(t, pub))
	must(t, err)
	return ok
}

// servesOtherLauncher checks that the second launcher's block volume is
// made and allowed.
func (s *blockScene) servesOtherLauncher(t *testing.T) {
	t.Helper()
	if r, err := s.attach(t, blockVolume(otherLauncher)); err != nil || r != outcome.Created {
		t.Fatalf("attach in another launcher = %s, %v; want created", r, err)
	}
	node := filepath.Join(s.real, kubelet.HotplugDisksDir(string(otherLauncher)), "blk")
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Uid != 107 || !s.allowed(t, otherLauncher) {
		t.Fatalf("other launcher's node: %+v, %v (allowed %v)", st, err, s.allowed(t, otherLauncher))
	}
}

// TestBlockHotplugDisksHostBind: a host directory bind-mounted on a
// launcher's hotplug-disks (or on kubernetes.io~empty-dir) refuses a block
// volume as unsafe content, as it refuses file binds (mount's
// launcher-directory rule, the one owner): no node is made in the host
// directory, no device rule is granted, observe and detach refuse too, the
// host directory keeps its entries, owner and mode, and another launcher's
// block volume is still made.
func TestBlockHotplugDisksHostBind(t *testing.T) {
	for _, on := range []string{"hotplug-disks", "kubernetes.io~empty-dir"} {
		t.Run(on, func(t *testing.T) {
			s := newBlockScene(t)
			target := filepath.Join(s.real, kubelet.HotplugDisksDir(string(launcherUID)))
			var extra []string
			if on != "hotplug-disks" {
				target = filepath.Dir(target)
				extra = append(extra, filepath.Join(s.hostDir, "hotplug-disks"))
				must(t, os.Mkdir(extra[0], 0o755))
			}
			must(t, unix.Mount(s.hostDir, target, "", unix.MS_BIND, ""))
			t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
			s.arm(t, extra...)
			r, err := s.attach(t, blockVolume(launcherUID))
			var refusal *kubevirt.Refusal
			if !errors.As(err, &refusal) || refusal.Reason != kubevirt.RefusedUnsafeContent || r != outcome.Unchanged {
				t.Fatalf("attach = %s, %v; want an unsafe-content refusal", r, err)
			}
			if s.allowed(t, launcherUID) {
				t.Error("the device was granted to a launcher whose hotplug-disks is a host directory")
			}
			if _, err := s.observe(t, launcherUID); !errors.Is(err, isolation.ErrUnsafePath) {
				t.Errorf("observe = %v, want unsafe", err)
			}
			blk := hotplug.ObservedVolume{Name: "blk", Mode: kubevirt.Block}
			if r, err := s.detach(t, blk); !errors.Is(err, isolation.ErrUnsafePath) || r != outcome.Unchanged {
				t.Errorf("detach = %s, %v; want unsafe", r, err)
			}
			s.unchanged(t)
			s.servesOtherLauncher(t)
		})
	}
}

// TestBlockNodeHostBind: a host file, or a host device node of the very
// disk the volume is (the host's /dev entry for it), bind-mounted on a
// block volume's node is never written through, chowned, chmodded or
// given a record: observe reports the node as not healthy, attach removes
// that mount alone and keeps the node, detach removes the mount and then
// the node. The host file keeps owner, mode, size, attributes and content;
// no mount is left; another launcher's block volume is still made.
func TestBlockNodeHostBind(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, kind := range []string{"host file", "host device node"} {
		t.Run(kind, func(t *testing.T) {
			s := newBlockScene(t)
			src := s.hostImg
			if kind == "host device node" {
				src = filepath.Join(s.hostDir, "disk")
				pub := filepath.Join(s.real, kubelet.CSIPublishFile("pv-blk", string(attachUID)))
				dev := deviceOf(t, pub)
				must(t, unix.Mknod(src, unix.S_IFBLK|0o660, int(unix.Mkdev(dev.Major, dev.Minor))))
				must(t, os.Chown(src, 0, 6))
			}
			v := blockVolume(launcherUID)
			if r, err := s.attach(t, v); err != nil || r != outcome.Created {
				t.Fatalf("attach = %s, %v; want created", r, err)
			}
			node := filepath.Join(s.real, kubelet.HotplugDisksDir(string(launcherUID)), "blk")
			cover := func() {
				t.Helper()
				must(t, unix.Mount(src, node, "", unix.MS_BIND, ""))
				t.Cleanup(func() { _ = unix.Unmount(node, unix.MNT_DETACH) })
			}
			cover()
			s.arm(t, src)
			obs, err := s.observe(t, launcherUID)
			if err != nil || len(obs) != 1 || obs[0].Healthy(kubevirt.Block) || !obs[0].Mounted {
				t.Fatalf("observe of a covered node = %+v, %v; want it listed, not healthy", obs, err)
			}
			if r, err := s.attach(t, v); err != nil || r != outcome.Replaced {
				t.Fatalf("attach over the bind = %s, %v; want replaced", r, err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(node, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Uid != 107 {
				t.Fatalf("node after attach: %+v, %v", st, err)
			}
			if slices.Contains(mountPoints(t), node) {
				t.Fatal("the bind is still on the node after attach")
			}
			s.unchanged(t)

			cover()
			obs, err = s.observe(t, launcherUID)
			if err != nil || len(obs) != 1 {
				t.Fatalf("observe = %+v, %v", obs, err)
			}
			if r, err := s.detach(t, obs[0]); err != nil || r != outcome.Removed {
				t.Fatalf("detach over the bind = %s, %v; want removed", r, err)
			}
			if _, err := os.Lstat(node); !os.IsNotExist(err) {
				t.Fatalf("node after detach: %v", err)
			}
			if slices.Contains(mountPoints(t), node) {
				t.Fatal("the bind is still on the node after detach")
			}
			s.unchanged(t)
			s.servesOtherLauncher(t)
		})
	}
}
