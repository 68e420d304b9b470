// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/test/simnode"
)

// scene is one attack on one VMI: a legitimate volume and an evil one,
// both carried by one attachment pod and published by the kubelet; the
// attack then changes what the tenant (or a compromised launcher) controls.
type scene struct {
	e          *env
	v          *vm
	good, evil simnode.Volume
	pod        *corev1.Pod
	host       *hostFiles
	// src is the evil volume's CSI publish directory, holding disk.img.
	src string
	// hotplug is the launcher's hotplug-disks directory.
	hotplug string
}

// attack is one case of the suite.
type attack struct {
	name string
	// event is a substring of the HotplugRefused Event's message.
	event string
	// tamper changes the scene after publishing, before the VMI asks for
	// the volumes.
	tamper func(t *testing.T, s *scene)
	// keep lists the names besides good.img that must be in hotplug-disks
	// afterwards, unchanged in kind: what the attack put there.
	keep map[string]os.FileMode
	// wholeLauncher: the attack is on hotplug-disks itself, so no volume of
	// this VMI can be served; a second VMI proves the agent still works.
	wholeLauncher bool
}

// TestSecurity: tenant content in a PVC and a launcher's hotplug-disks
// directory that try to make the agent mount, create, chown, chmod,
// truncate or write anything outside that directory. Each attack is refused
// with a Warning Event and a counted refusal; a legitimate volume of the
// same VMI (or, for attacks on hotplug-disks itself, of another VMI) is
// still mounted, so a refusal never passes because the agent did nothing;
// the host's files are unchanged (owner, mode, size, times, content, and
// no open for writing seen by inotify) and no mount appears elsewhere.
func TestSecurity(t *testing.T) {
	e := newEnv(t)
	host := newHostFiles(t, e)
	for i, a := range append(sourceAttacks(host), targetAttacks(host)...) {
		e.step(a.name, func(t *testing.T) { e.runAttack(t, host, fmt.Sprintf("atk-%02d", i), a) })
	}
	e.step("agent still healthy", func(t *testing.T) { e.must(e.agent.Ready()) })
}

func (e *env) runAttack(t *testing.T, host *hostFiles, name string, a attack) {
	start := time.Now()
	v := e.newVM("tenant-evil", name)
	s := &scene{e: e, v: v, host: host, hotplug: e.node.HotplugDisksDir(string(v.Launcher.UID))}
	s.good = v.addVolume("good", "ext4", 64<<20)
	s.evil = v.addVolume("evil", "ext4", 64<<20)
	s.pod = v.newAttachmentPod(s.good, s.evil)
	s.src = e.node.CSIMountDir(string(s.pod.UID), s.evil.PV)
	a.tamper(t, s)
	var witness *vm
	var wvol simnode.Volume
	if a.wholeLauncher {
		witness = e.newVM("tenant-evil", name+"-witness")
		wvol = witness.addVolume("good", "ext4", 64<<20)
		witness.newAttachmentPod(wvol)
	}
	host.drain()
	files, mounts, refusals := host.snapshot(t), mountSet(t), e.refusalCounts()

	v.apply()
	if witness != nil {
		witness.apply()
	}
	e.waitEvent(v.NS, v.Name, "HotplugRefused", "unsafe-content")
	e.waitEvent(v.NS, v.Name, "HotplugRefused", a.event)
	allowed := []string{s.hotplug}
	if witness != nil {
		witness.waitMounted(wvol)
		allowed = []string{e.node.HotplugDisksDir(string(witness.Launcher.UID))}
	} else {
		v.waitMounted(s.good)
		v.roundTrip(t, s.good, "legit-"+name)
	}
	if d := e.refusalCounts()[`reason="unsafe-content"`] - refusals[`reason="unsafe-content"`]; d < 1 {
		t.Errorf("hpmount_refusals_total{reason=\"unsafe-content\"} rose by %v, want at least 1", d)
	}
	// A resync passes: a refusal must stay one, not turn into an attempt.
	time.Sleep(e2eResync + 500*time.Millisecond)
	host.unchanged(t, files)
	newMountsOnlyUnder(t, mounts, allowed...)
	if !a.wholeLauncher {
		s.wantEntries(t, a.keep)
	}
	t.Logf("refused and served in %v", time.Since(start).Round(time.Millisecond))
}

// wantEntries checks that hotplug-disks holds good.img and exactly what
// the attack put there, of the same kind.
func (s *scene) wantEntries(t *testing.T, keep map[string]os.FileMode) {
	t.Helper()
	entries, err := os.ReadDir(s.hotplug)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		got = append(got, en.Name())
		if en.Name() == "good.img" {
			continue
		}
		kind, ok := keep[en.Name()]
		if !ok {
			t.Errorf("hotplug-disks holds unexpected %q", en.Name())
		} else if en.Type() != kind {
			t.Errorf("%q is now %v, was made as %v", en.Name(), en.Type(), kind)
		}
	}
	if len(got) != len(keep)+1 {
		sort.Strings(got)
		t.Errorf("hotplug-disks holds %v, want good.img and %d planted", got, len(keep))
	}
}

// replaceImage removes the published disk.img so that the attack can put
// something else under its name.
func (s *scene) replaceImage(t *testing.T) string {
	t.Helper()
	img := filepath.Join(s.src, "disk.img")
	s.e.must(os.Remove(img))
	return img
}

func symlinkImage(target string) func(t *testing.T, s *scene) {
	return func(t *testing.T, s *scene) {
		s.e.must(os.Symlink(target, s.replaceImage(t)))
	}
}

func sourceAttacks(h *hostFiles) []attack {
	return []attack{
		{name: "disk.img symlink to a host file", event: "symlink", tamper: symlinkImage(h.Secret)},
		{name: "disk.img symlink through /proc/self/root", event: "symlink", tamper: symlinkImage("/proc/self/root" + h.Secret)},
		{name: "disk.img symlink to ..", event: "symlink", tamper: symlinkImage("..")},
		{name: "disk.img relative symlink climbing out", event: "symlink", tamper: symlinkImage(strings.Repeat("../", 16) + strings.TrimPrefix(h.Secret, "/"))},
		{name: "disk.img symlink to a host directory", event: "symlink", tamper: symlinkImage(h.SubDir)},
		{name: "disk.img is a directory", event: "directory", tamper: func(t *testing.T, s *scene) {
			img := s.replaceImage(t)
			s.e.must(os.Mkdir(img, 0o755))
			s.e.must(os.Symlink(h.Secret, filepath.Join(img, "disk.img")))
		}},
		{name: "disk.img block device of a host disk", event: "block device", tamper: func(t *testing.T, s *scene) {
			var st unix.Stat_t
			s.e.must(unix.Stat(h.Disk, &st))
			s.e.must(unix.Mknod(s.replaceImage(t), unix.S_IFBLK|0o666, int(st.Rdev)))
		}},
		{name: "disk.img character device /dev/mem", event: "character device", tamper: func(t *testing.T, s *scene) {
			s.e.must(unix.Mknod(s.replaceImage(t), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))))
		}},
		{name: "disk.img FIFO", event: "FIFO", tamper: func(t *testing.T, s *scene) {
			s.e.must(unix.Mkfifo(s.replaceImage(t), 0o666))
		}},
		{name: "disk.img socket", event: "socket", tamper: func(t *testing.T, s *scene) {
			s.replaceImage(t)
			// sun_path holds 108 bytes: bind through a short fd path.
			dir, err := os.Open(s.src)
			s.e.must(err)
			defer dir.Close()
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			s.e.must(err)
			defer unix.Close(fd)
			s.e.must(unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/disk.img", dir.Fd())}))
		}},
		// The bind stays: the node's teardown detaches the kubelet root.
		{name: "disk.img bind mount of a host file", event: "crosses a mount point", tamper: func(t *testing.T, s *scene) {
			s.e.must(unix.Mount(h.Secret, filepath.Join(s.src, "disk.img"), "", unix.MS_BIND, ""))
		}},
		{name: "disk.img hard link to a file outside the PVC", event: "hard links", tamper: hardLinkOutside(h)},
	}
}

// hardLinkOutside publishes the evil volume as a subdirectory of a shared
// filesystem, as subdirectory-provisioning CSI drivers (NFS, CephFS) do,
// and makes disk.img a hard link to a file of that filesystem outside the
// PVC's directory.
func hardLinkOutside(h *hostFiles) func(t *testing.T, s *scene) {
	return func(t *testing.T, s *scene) {
		e := s.e
		share := filepath.Join(h.Dir, "..", "share-"+s.v.Name)
		e.must(os.MkdirAll(share, 0o755))
		d, err := e.node.NewDisk("share-"+s.v.Name, "ext4", 64<<20)
		e.must(err)
		e.must(unix.Mount(d.Device, share, "ext4", 0, ""))
		e.root.Cleanup(func() { unix.Unmount(share, unix.MNT_DETACH) })
		outside := filepath.Join(share, "other-tenant.img")
		e.must(os.WriteFile(outside, []byte("another tenant's disk"), 0o600))
		pvc := filepath.Join(share, "pvc")
		e.must(os.Mkdir(pvc, 0o755))
		e.must(os.Link(outside, filepath.Join(pvc, "disk.img")))
		e.must(unix.Unmount(s.src, unix.MNT_DETACH))
		e.must(unix.Mount(pvc, s.src, "", unix.MS_BIND, ""))
		h.Extra = append(h.Extra, outside)
	}
}

// plant puts something under evil.img's name in hotplug-disks before the
// agent attaches it.
func plant(kind os.FileMode, make func(s *scene, path string) error) attack {
	return attack{keep: map[string]os.FileMode{"evil.img": kind}, tamper: func(t *testing.T, s *scene) {
		s.e.must(make(s, filepath.Join(s.hotplug, "evil.img")))
	}}
}

func targetAttacks(h *hostFiles) []attack {
	link := plant(os.ModeSymlink, func(s *scene, p string) error { return os.Symlink(h.Secret, p) })
	link.name, link.event = "target name is a symlink to a host file", "symlink"
	fifo := plant(os.ModeNamedPipe, func(s *scene, p string) error { return unix.Mkfifo(p, 0o666) })
	fifo.name, fifo.event = "target name is a FIFO", "FIFO"
	return []attack{link, fifo,
		// O_DIRECTORY|O_NOFOLLOW on the link itself answers ENOTDIR.
		{name: "hotplug-disks is a symlink to a host directory", event: "not a directory", wholeLauncher: true,
			tamper: func(t *testing.T, s *scene) {
				s.e.must(os.Remove(s.hotplug))
				s.e.must(os.Symlink(h.SubDir, s.hotplug))
			}},
		// The binds stay: the node's teardown detaches the kubelet root.
		{name: "hotplug-disks is a bind mount of a host directory", event: "not a memory-medium emptyDir", wholeLauncher: true,
			tamper: func(t *testing.T, s *scene) {
				s.e.must(unix.Mount(h.SubDir, s.hotplug, "", unix.MS_BIND, ""))
			}},
		{name: "kubernetes.io~empty-dir is a bind mount of a host directory", event: "which the kubelet never mounts", wholeLauncher: true,
			tamper: func(t *testing.T, s *scene) {
				// Beside the watched host directory, whose entries are counted.
				dir := filepath.Join(h.Dir, "..", "empty-dir-"+s.v.Name)
				s.e.must(os.MkdirAll(filepath.Join(dir, "hotplug-disks"), 0o755))
				s.e.must(unix.Mount(dir, filepath.Dir(s.hotplug), "", unix.MS_BIND, ""))
			}},
		{name: "kubernetes.io~empty-dir is a symlink to a host directory", event: "symlink", wholeLauncher: true,
			tamper: func(t *testing.T, s *scene) {
				emptyDir := filepath.Dir(s.hotplug)
				s.e.must(os.RemoveAll(emptyDir))
				s.e.must(os.Symlink(h.Dir, emptyDir))
			}},
	}
}
