// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/test/harness"
)

// hostFiles are the host's files an attack aims at, outside the kubelet
// root: a secret, a directory, a raw disk and /dev/mem. Their owner, mode,
// size, times and content are compared before and after each attack, and an
// inotify watch reports anything that opened one for writing, changed its
// attributes or created or removed a name beside it.
type hostFiles struct {
	Dir, Secret, SubDir, Disk string
	// Extra are further host files a case adds (e.g. the target of a hard
	// link); they are snapshotted too.
	Extra   []string
	inotify int
}

// fileState is what an attack must not change about a host file.
type fileState struct {
	uid, gid, mode uint32
	size           int64
	mtime, ctime   unix.Timespec
	sum            [32]byte
}

func newHostFiles(t *testing.T, e *env) *hostFiles {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	e.must(err)
	h := &hostFiles{Dir: dir, Secret: filepath.Join(dir, "secret"), SubDir: filepath.Join(dir, "etc")}
	e.must(os.WriteFile(h.Secret, []byte("root:host-secret\n"), 0o600))
	e.must(os.Mkdir(h.SubDir, 0o755))
	e.must(os.WriteFile(filepath.Join(h.SubDir, "passwd"), []byte("root:x:0:0\n"), 0o644))
	disk, err := e.node.NewDisk("host-disk", "", 16<<20)
	e.must(err)
	h.Disk = disk.Device
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	e.must(err)
	h.inotify = fd
	t.Cleanup(func() { unix.Close(fd) })
	const changes = unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CREATE |
		unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	for _, p := range []string{dir, h.SubDir, h.Disk, "/dev/mem"} {
		if _, err := unix.InotifyAddWatch(fd, p, changes); err != nil && !os.IsNotExist(err) {
			e.must(fmt.Errorf("watch %q: %w", p, err))
		}
	}
	return h
}

func (h *hostFiles) paths() []string {
	p := []string{h.Dir, h.Secret, h.SubDir, filepath.Join(h.SubDir, "passwd"), h.Disk, "/dev/mem"}
	return append(p, h.Extra...)
}

// snapshot records every host file's state; a file that does not exist is
// recorded as such.
func (h *hostFiles) snapshot(t *testing.T) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	for _, p := range h.paths() {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			continue
		}
		fs := fileState{uid: st.Uid, gid: st.Gid, mode: st.Mode, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
		if st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFBLK {
			fs.sum = contentSum(t, p)
		}
		out[p] = fs
	}
	return out
}

// contentSum hashes the first MiB of a file or disk.
func contentSum(t *testing.T, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hash := sha256.New()
	if _, err := io.Copy(hash, io.LimitReader(f, 1<<20)); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], hash.Sum(nil))
	return sum
}

// unchanged fails the test if a host file differs from before or the
// inotify watch saw a change.
func (h *hostFiles) unchanged(t *testing.T, before map[string]fileState) {
	t.Helper()
	after := h.snapshot(t)
	for p, b := range before {
		if a, ok := after[p]; !ok || a != b {
			t.Errorf("host file %q changed: before %+v, after %+v (present %v)", p, b, a, ok)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("host file %q appeared", p)
		}
	}
	if ev := h.drain(); len(ev) > 0 {
		t.Errorf("host files were written or changed: %s", strings.Join(ev, "; "))
	}
	entries, err := os.ReadDir(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("host directory %q holds %d entries, want 2", h.Dir, len(entries))
	}
}

// drain returns the inotify events queued since the last call.
func (h *hostFiles) drain() []string {
	var out []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(h.inotify, buf)
		if n <= 0 || err != nil {
			return out
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00")
			out = append(out, fmt.Sprintf("wd %d mask %#x %q", ev.Wd, ev.Mask, name))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// mountSet is the host's mount table as "mount point [root] dev" lines.
func mountSet(t *testing.T) map[string]bool {
	t.Helper()
	tbl, err := harness.HostTable()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range tbl.Mounts() {
		out[fmt.Sprintf("%s [%s] %s", m.MountPoint, m.Root, m.Dev())] = true
	}
	return out
}

// newMountsOnlyUnder fails the test if a mount appeared outside dirs since
// before.
func newMountsOnlyUnder(t *testing.T, before map[string]bool, dirs ...string) {
	t.Helper()
	var outside []string
	for m := range mountSet(t) {
		if before[m] {
			continue
		}
		ok := false
		for _, d := range dirs {
			ok = ok || strings.HasPrefix(m, d+"/")
		}
		if !ok {
			outside = append(outside, m)
		}
	}
	sort.Strings(outside)
	if len(outside) > 0 {
		t.Errorf("mounts appeared outside %v: %v", dirs, outside)
	}
}

// refusalCounts reads hpmount_refusals_total by reason.
func (e *env) refusalCounts() map[string]float64 {
	e.t.Helper()
	text, err := e.agent.Scrape()
	e.must(err)
	c, err := harness.Counters(text, "hpmount_refusals_total")
	e.must(err)
	return c
}
