// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/outcome"
)

// hostFacts is what must not change about a host path: kind, mode, owner,
// size and content (a directory's entry names).
func hostFacts(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	facts := fmt.Sprintf("%s %o %d:%d %d", isolation.FileKind(st.Mode), st.Mode&0o7777, st.Uid, st.Gid, st.Size)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		entries, err := os.ReadDir(p)
		must(t, err)
		for _, e := range entries {
			facts += " " + e.Name()
		}
		return facts
	}
	return facts + " " + contentOf(t, p)
}

// witness is the host side of a root test of the launcher's directories:
// the race scene's host directory and secret, plus a host tmpfs standing
// for /dev/shm, their facts, and the namespace's mounts before the attack.
type witness struct {
	*raceScene
	shm    string
	facts  map[string]string
	before map[string]bool
}

func newWitness(t *testing.T) *witness {
	w := &witness{raceScene: newRaceScene(t)}
	w.shm = filepath.Join(w.n.base, "shm")
	must(t, os.Mkdir(w.shm, 0o1777))
	must(t, unix.Mount("hostshm", w.shm, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { unix.Unmount(w.shm, unix.MNT_DETACH) })
	must(t, os.WriteFile(filepath.Join(w.shm, "session"), []byte("host shm"), 0o600))
	// A host directory laid out like a launcher's pod directory, for
	// binds onto the directories above hotplug-disks.
	must(t, os.MkdirAll(w.hostPod(launchDir), 0o755))
	for _, d := range []string{w.shm, w.hostPod(filepath.Dir(launchDir)), w.hostPod(launchDir)} {
		_, err := unix.InotifyAddWatch(w.inotify, d, unix.IN_CLOSE_WRITE|unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO)
		must(t, err)
	}
	return w
}

// hostPod is rel (a path under pods/<launcher>/ or that of a launcher's
// hotplug-disks) in the host directory laid out like a pod directory.
func (w *witness) hostPod(rel string) string {
	rel = strings.TrimPrefix(rel, "pods/9f8e-launcher")
	return filepath.Join(w.hostDir, "pod", rel)
}

// watched are the host paths an attack aims at.
func (w *witness) watched() []string {
	return []string{w.hostDir, w.secret, w.hostPod(""), w.hostPod("volumes"), w.hostPod("volumes/kubernetes.io~empty-dir"),
		w.hostPod(launchDir), w.shm, filepath.Join(w.shm, "session")}
}

// arm records the host's facts and mounts once the attack is in place.
func (w *witness) arm(t *testing.T) {
	w.facts = map[string]string{}
	for _, p := range w.watched() {
		w.facts[p] = hostFacts(t, p)
	}
	w.before = w.mounts(t)
	buf := make([]byte, 4096)
	for n, _ := unix.Read(w.inotify, buf); n > 0; n, _ = unix.Read(w.inotify, buf) {
	}
}

// unchanged checks the host paths' facts, inotify, and that every new
// mount is on one of targets.
func (w *witness) unchanged(t *testing.T, targets ...string) {
	t.Helper()
	for _, p := range w.watched() {
		if got := hostFacts(t, p); got != w.facts[p] {
			t.Errorf("host %q changed: %q, was %q", p, got, w.facts[p])
		}
	}
	if n, _ := unix.Read(w.inotify, make([]byte, 4096)); n > 0 {
		t.Errorf("host files changed (%d bytes of inotify events)", n)
	}
	for m := range w.mounts(t) {
		point, _, _ := strings.Cut(m, " [")
		if !w.before[m] && !slices.Contains(targets, point) {
			t.Errorf("new mount outside the targets: %s", m)
		}
	}
}

func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	must(t, unix.Mount(src, dst, "", unix.MS_BIND, ""))
}

// TestLauncherDirMounts: a bind of a host path onto hotplug-disks, onto a
// directory above it in the launcher's pod directory, or a tmpfs that is a
// bind of the host's (root "/" like the kubelet's, but mounted elsewhere
// too) is refused as unsafe content by every operation before anything is
// created, mounted or chowned there, and the host's files keep kind, mode,
// owner, size and content. A memory-medium emptyDir (a tmpfs of its own on
// hotplug-disks) is served, and so is a second launcher of the node.
func TestLauncherDirMounts(t *testing.T) {
	const other = "pods/7c6d-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks"
	for _, tc := range []struct {
		name   string
		attack func(t *testing.T, w *witness)
		// why is in the refusal; "" means the layout is the kubelet's
		// and the volume attaches.
		why string
	}{
		{"hotplug-disks bind of a host directory", func(t *testing.T, w *witness) {
			bindMount(t, w.hostDir, w.n.path(launchDir))
		}, "not a memory-medium emptyDir"},
		{"kubernetes.io~empty-dir bind of a host directory", func(t *testing.T, w *witness) {
			bindMount(t, w.hostPod("volumes/kubernetes.io~empty-dir"), w.n.path(filepath.Dir(launchDir)))
		}, "which the kubelet never mounts"},
		{"pod directory bind of a host directory", func(t *testing.T, w *witness) {
			bindMount(t, w.hostPod(""), w.n.path("pods/9f8e-launcher"))
		}, "which the kubelet never mounts"},
		{"hotplug-disks bind of the host's tmpfs", func(t *testing.T, w *witness) {
			bindMount(t, w.shm, w.n.path(launchDir))
		}, "also mounted at"},
		{"hotplug-disks bind of a directory of a tmpfs", func(t *testing.T, w *witness) {
			sub := filepath.Join(w.shm, "sub")
			must(t, os.Mkdir(sub, 0o755))
			t.Cleanup(func() { os.Remove(sub) })
			bindMount(t, sub, w.n.path(launchDir))
		}, "not a memory-medium emptyDir"},
		{"memory-medium emptyDir", func(t *testing.T, w *witness) {
			must(t, unix.Mount("tmpfs", w.n.path(launchDir), "tmpfs", 0, "size=1m"))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWitness(t)
			must(t, os.MkdirAll(w.n.path(other), 0o755))
			tc.attack(t, w)
			w.arm(t)
			target := w.n.path(launchDir, "vol.img")
			if tc.why == "" {
				if res, err := w.n.a.Attach(hostTable(t), hpVolDir, launchDir, "vol.img"); err != nil || res != outcome.Mounted {
					t.Fatalf("attach into a memory-medium emptyDir: %v %v, want Mounted", res, err)
				}
				w.n.wantSingleBind(t, "vol")
				if _, err := InLauncherDir(w.n.a, hostTable(t), launchDir, func(*os.File) (int, error) { return 0, nil }); err != nil {
					t.Fatalf("InLauncherDir of a memory-medium emptyDir: %v", err)
				}
				if res, err := w.n.a.Detach(hostTable(t), launchDir, "vol.img"); err != nil || res != outcome.Removed {
					t.Fatalf("detach: %v %v, want Removed", res, err)
				}
				w.unchanged(t)
				return
			}
			tbl := hostTable(t)
			refused := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, isolation.ErrUnsafePath) || !strings.Contains(err.Error(), tc.why) {
					t.Errorf("%s: %v, want a refusal naming %q", op, err, tc.why)
				}
			}
			_, err := w.n.a.Attach(tbl, hpVolDir, launchDir, "vol.img")
			refused("attach", err)
			_, err = w.n.a.AttachDir(tbl, hpVolDir, launchDir, "dump")
			refused("attach directory", err)
			_, err = w.n.a.Observe(tbl, launchDir, listFiles)
			refused("observe", err)
			_, err = w.n.a.ObserveDirs(tbl, launchDir, listDirs)
			refused("observe directories", err)
			_, err = w.n.a.Detach(tbl, launchDir, "vol.img")
			refused("detach", err)
			_, err = w.n.a.DetachDir(tbl, launchDir, "dump")
			refused("detach directory", err)
			_, err = InLauncherDir(w.n.a, tbl, launchDir, func(*os.File) (int, error) {
				t.Error("InLauncherDir handed out a refused directory")
				return 0, nil
			})
			refused("block volumes' directory (InLauncherDir)", err)
			w.unchanged(t)
			if _, err := os.Lstat(target); err == nil {
				t.Errorf("%q was created", target)
			}
			// Another launcher of the node is still served.
			if res, err := w.n.a.Attach(hostTable(t), hpVolDir, other, "vol.img"); err != nil || res != outcome.Mounted {
				t.Fatalf("attach into another launcher: %v %v, want Mounted", res, err)
			}
			w.unchanged(t, w.n.path(other, "vol.img"))
		})
	}
}

// TestTargetHostBinds: a bind of a host file onto <vol>.img, or of a host
// directory onto a directory volume's <vol>/, is replaced on attach and
// removed on detach by unmounting it alone: the host file or directory
// keeps kind, mode, owner, size and content (nothing is written, chowned
// or truncated through it), no mount appears but the volume's on its
// target, and a legitimate volume of the same launcher still attaches.
func TestTargetHostBinds(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  bool
		// detach: the volume is leaving, so the bind is removed, not
		// replaced.
		detach bool
	}{
		{name: "host file on <vol>.img, attached"},
		{name: "host file on <vol>.img, detached", detach: true},
		{name: "host directory on <vol>/, attached", dir: true},
		{name: "host directory on <vol>/, detached", dir: true, detach: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWitness(t)
			evil := w.n.path(launchDir, "evil.img")
			attach, detach, host := w.n.a.Attach, w.n.a.Detach, w.secret
			if tc.dir {
				evil = w.n.path(launchDir, "evil")
				attach, detach, host = w.n.a.AttachDir, w.n.a.DetachDir, w.hostDir
				must(t, os.Mkdir(evil, 0o750))
			} else {
				must(t, os.WriteFile(evil, nil, 0o660))
			}
			bindMount(t, host, evil)
			w.arm(t)
			name := filepath.Base(evil)
			want := outcome.Replaced
			res, err := attach(hostTable(t), hpVolDir, launchDir, name)
			if tc.detach {
				want = outcome.Removed
				res, err = detach(hostTable(t), launchDir, name)
			}
			if err != nil || res != want {
				t.Fatalf("%v %v, want %v", res, err, want)
			}
			if stack := hostTable(t).At(evil); tc.detach && len(stack) != 0 {
				t.Errorf("%d mounts left on %q", len(stack), evil)
			} else if !tc.detach && (len(stack) != 1 || stack[0].Major != unix.Major(w.n.loop.Dev(t))) {
				t.Errorf("mounts on %q: %v, want the volume's alone", evil, stack)
			}
			if res, err := w.n.a.Attach(hostTable(t), hpVolDir, launchDir, "good.img"); err != nil || res != outcome.Mounted {
				t.Fatalf("attach good: %v %v, want Mounted", res, err)
			}
			w.n.wantSingleBind(t, "good")
			w.unchanged(t, evil, w.n.path(launchDir, "good.img"))
			entries, err := os.ReadDir(w.n.path(launchDir))
			must(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			if wantNames := map[bool]string{false: "evil.img good.img", true: "evil good.img"}[tc.dir]; tc.detach {
				if strings.Join(names, " ") != "good.img" {
					t.Errorf("hotplug-disks holds %v after detach, want good.img", names)
				}
			} else if strings.Join(names, " ") != wantNames {
				t.Errorf("hotplug-disks holds %v, want %s", names, wantNames)
			}
		})
	}
}

// TestUncover: a host file bound on a block volume's name in hotplug-disks
// is unmounted alone, the entry below it kept and the host file unchanged;
// a name with nothing mounted on it is left as it is.
func TestUncover(t *testing.T) {
	w := newWitness(t)
	name := w.n.path(launchDir, "blk")
	must(t, os.WriteFile(name, nil, 0o600))
	bindMount(t, w.secret, name)
	bindMount(t, w.secret, name)
	w.arm(t)
	count := func() int {
		t.Helper()
		n, err := InLauncherDirLive(w.n.a, hostTable(t), launchDir, func(live *isolation.Live, dir *os.File) (int, error) {
			return Uncover(live, hostTable(t), dir, "blk")
		})
		must(t, err)
		return n
	}
	if n := count(); n != 2 {
		t.Fatalf("uncovered %d mounts, want the 2 stacked on %q", n, name)
	}
	if stack := hostTable(t).At(name); len(stack) != 0 {
		t.Fatalf("mounts left on %q: %v", name, stack)
	}
	if n := count(); n != 0 {
		t.Fatalf("uncovered %d mounts of a bare name", n)
	}
	if got := contentOf(t, name); got != "" {
		t.Fatalf("the entry below the mounts holds %q", got)
	}
	w.unchanged(t)
}
