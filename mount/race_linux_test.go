// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// racesEnv sets the number of races TestAttachSwapRace runs; make fuzz
// runs 10,000.
const racesEnv = "HPMOUNT_RACES"

// defaultRaces is what make test runs.
const defaultRaces = 1000

// swap is one tenant trick raced against Attach: a name exchanged, again
// and again, with a symlink aiming at the host (renameat2 RENAME_EXCHANGE,
// so the name is never missing and each exchange is atomic).
type swap struct {
	name string
	// real is the path the agent expects, decoy the symlink it is
	// exchanged with; both relative to the kubelet root.
	real, decoy string
	// aim is the decoy's target.
	aim string
}

// raceScene is a node prepared for swaps: the host's files the decoys aim
// at, watched with inotify.
type raceScene struct {
	n        *node
	hostDir  string
	secret   string
	fakeVol  string // a host directory laid out like a published volume
	inotify  int
	baseline map[string]bool
	img      unix.Stat_t
}

func newRaceScene(t *testing.T) *raceScene {
	n := newNode(t, "ext4")
	s := &raceScene{n: n, hostDir: filepath.Join(n.base, "host")}
	s.secret = filepath.Join(s.hostDir, "secret")
	s.fakeVol = filepath.Join(s.hostDir, "volume")
	must(t, os.MkdirAll(filepath.Join(s.fakeVol, "mount"), 0o755))
	must(t, os.WriteFile(s.secret, []byte("host secret"), 0o600))
	must(t, os.WriteFile(filepath.Join(s.fakeVol, "mount", "disk.img"), []byte("host file named disk.img"), 0o600))
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	s.inotify = fd
	const changes = unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO
	for _, d := range []string{s.hostDir, s.fakeVol, filepath.Join(s.fakeVol, "mount")} {
		_, err := unix.InotifyAddWatch(fd, d, changes)
		must(t, err)
	}
	must(t, unix.Stat(n.path(hpVolDir, "disk.img"), &s.img))
	s.baseline = s.mounts(t)
	return s
}

func (s *raceScene) swaps() []swap {
	vol := filepath.Dir(hpVolDir) // the kubelet's pv directory holding mount/
	return []swap{
		{"disk.img with a symlink to a host file", hpVolDir + "/disk.img", hpVolDir + "/decoy-abs", s.secret},
		{"disk.img with a relative symlink climbing out", hpVolDir + "/disk.img", hpVolDir + "/decoy-rel", strings.Repeat("../", 16) + strings.TrimPrefix(s.secret, "/")},
		{"the volume's parent directory with a symlink to a host directory", vol, vol + ".decoy", s.fakeVol},
		{"<vol>.img with a symlink to a host file", launchDir + "/vol.img", launchDir + "/decoy", s.secret},
		{"hotplug-disks with a symlink to a host directory", launchDir, launchDir + ".decoy", s.hostDir},
	}
}

// mounts is the set of "mount point [root] dev" of the namespace.
func (s *raceScene) mounts(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, m := range hostTable(t).Mounts() {
		out[fmt.Sprintf("%s [%s] %s", m.MountPoint, m.Root, m.Dev())] = true
	}
	return out
}

// escapes lists what the last race did outside the launcher's target: a
// mount other than disk.img's bind on <vol>.img, a target showing another
// inode, or a change to the host's files.
func (s *raceScene) escapes(t *testing.T, swapped bool) []string {
	var out []string
	target := s.n.path(launchDir, "vol.img")
	dev := s.n.loop.Dev(t)
	// A mount may land on the agent's own file under the decoy's name when
	// the exchange wins between open and move_mount: still inside
	// hotplug-disks, still the tenant's own disk.img.
	inside, bind := s.n.path(launchDir)+"/", fmt.Sprintf(" [/disk.img] %d:%d", unix.Major(dev), unix.Minor(dev))
	for m := range s.mounts(t) {
		if !s.baseline[m] && !(strings.HasPrefix(m, inside) && strings.HasSuffix(m, bind)) {
			out = append(out, "mount "+m)
		}
	}
	if swapped {
		// The names are still exchanged; reset sorts them out, and the
		// mounts above are what matters.
		return out
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		out = append(out, fmt.Sprintf("target is a %s", isolation.FileKind(st.Mode)))
	}
	if err := unix.Stat(target, &st); err == nil && st.Dev == s.img.Dev && st.Ino != s.img.Ino {
		out = append(out, fmt.Sprintf("target shows inode %d, not disk.img's %d", st.Ino, s.img.Ino))
	}
	buf := make([]byte, 4096)
	if n, _ := unix.Read(s.inotify, buf); n > 0 {
		out = append(out, fmt.Sprintf("host files changed (%d bytes of inotify events)", n))
	}
	return out
}

// raced is what a racer did: how many exchanges, and whether it had to
// leave the names exchanged (a mount on one of them makes rename EBUSY).
type raced struct {
	exchanges int
	swapped   bool
}

// racer exchanges sw.real and sw.decoy until stop is set, then leaves the
// names as they were if it can.
func (s *raceScene) racer(t *testing.T, sw swap, stop *atomic.Bool, done chan<- raced) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	real, decoy := s.n.path(sw.real), s.n.path(sw.decoy)
	var r raced
	defer func() { done <- r }()
	for !stop.Load() || r.swapped {
		err := unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, decoy, unix.RENAME_EXCHANGE)
		switch {
		case err == nil:
			r.swapped = !r.swapped
			r.exchanges++
		case errors.Is(err, unix.EBUSY):
			return
		case !errors.Is(err, unix.ENOENT):
			t.Errorf("exchange %q and %q: %v", real, decoy, err)
			return
		}
	}
}

// reset undoes a race that left its names exchanged: whatever got mounted
// on either name is unmounted, and the names are exchanged back.
func (s *raceScene) reset(t *testing.T, sw swap, r raced) {
	if !r.swapped {
		return
	}
	real, decoy := s.n.path(sw.real), s.n.path(sw.decoy)
	for _, p := range []string{real, decoy} {
		for unix.Unmount(p, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH) == nil {
		}
	}
	must(t, unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, decoy, unix.RENAME_EXCHANGE))
}

// TestAttachSwapRace: disk.img, the volume's parent directory, the target
// and hotplug-disks are exchanged with symlinks aiming at the host in a
// tight loop while Attach runs. Every race must end with either a refusal
// or disk.img's own inode bound on <vol>.img, and nothing else mounted,
// created or changed. HPMOUNT_RACES sets the count (make fuzz: 10,000).
func TestAttachSwapRace(t *testing.T) {
	races := defaultRaces
	if v := os.Getenv(racesEnv); v != "" {
		var err error
		if races, err = strconv.Atoi(v); err != nil || races < 1 {
			t.Fatalf("%s=%q: want a positive number", racesEnv, v)
		}
	}
	s := newRaceScene(t)
	swaps := s.swaps()
	for _, sw := range swaps {
		must(t, os.Symlink(sw.aim, s.n.path(sw.decoy)))
	}
	start := time.Now()
	var mounted, refused, failed, exchanges int
	var escapes []string
	ran := 0
	for ; ran < races && len(escapes) == 0; ran++ {
		i := ran
		sw := swaps[i%len(swaps)]
		var stop atomic.Bool
		done := make(chan raced, 1)
		go s.racer(t, sw, &stop, done)
		_, err := s.n.a.Attach(hostTable(t), hpVolDir, launchDir, "vol.img")
		stop.Store(true)
		r := <-done
		exchanges += r.exchanges
		switch {
		case err == nil:
			mounted++
		case errors.Is(err, isolation.ErrUnsafePath):
			refused++
		default:
			failed++ // a name missing in mid-exchange, say: an error, no escape
		}
		for _, esc := range s.escapes(t, r.swapped) {
			escapes = append(escapes, fmt.Sprintf("race %d (%s): %s", i, sw.name, esc))
		}
		s.reset(t, sw, r)
		if _, err := s.n.a.Detach(hostTable(t), launchDir, "vol.img"); err != nil {
			t.Fatalf("race %d: detach after the race: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	t.Logf("races: %d in %v (%d exchanges): %d mounted, %d refused, %d other errors, %d escapes",
		ran, elapsed.Round(time.Millisecond), exchanges, mounted, refused, failed, len(escapes))
	fmt.Printf("TestAttachSwapRace: %d races, %d escapes, %v\n", ran, len(escapes), elapsed.Round(time.Millisecond))
	for _, esc := range escapes {
		t.Error(esc)
	}
	if races >= 100 && (mounted == 0 || refused == 0) {
		t.Errorf("the races never went both ways (%d mounted, %d refused): the swaps did not race Attach", mounted, refused)
	}
	if got := contentOf(t, s.secret); got != "host secret" {
		t.Errorf("host secret now holds %q", got)
	}
}

func contentOf(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}
