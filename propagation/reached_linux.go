// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

func reached(l Launcher, name string, want Ident) (Sight, []Bound, error) {
	sight, seen, seenNS := NoView, false, map[uint64]bool{}
	var notSeen error
	var binds []Bound
	// Every namespace is asked, not only up to the first that sees want:
	// QEMU's may be any of them, and its bind is what Held needs later.
	for _, pid := range l.Pids {
		ns, err := mountNS(l.Proc, pid)
		if err != nil || seenNS[ns] {
			continue // gone meanwhile, or a namespace already asked
		}
		seenNS[ns] = true
		got, gotErr, mounts := lookInto(l, pid, name)
		switch {
		case !mounts:
			continue
		case gotErr == nil && got.File == want:
			seen = true
			if got.Mount != 0 {
				binds = append(binds, got)
			}
			continue
		}
		sight, notSeen = NotSeen, &NotSeenError{Name: name, Pid: pid, Want: want, Got: got.File, GotErr: gotErr}
	}
	if seen {
		return Seen, binds, nil
	}
	return sight, nil, notSeen
}

func mountNS(proc string, pid int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(proc, strconv.Itoa(pid), "ns", "mnt"), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// lookInto stats name in the process's view of hotplug-disks: the file
// there and the mount it is on. mounts is false when the process does not
// mount the host's hotplug-disks at Dir.
func lookInto(l Launcher, pid int, name string) (got Bound, gotErr error, mounts bool) {
	root, err := os.OpenFile(filepath.Join(l.Proc, strconv.Itoa(pid), "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Bound{}, nil, false
	}
	defer root.Close()
	dir, err := isolation.OpenInRoot(root, l.Dir)
	if err != nil {
		return Bound{}, nil, false
	}
	defer dir.Close()
	if id, err := identOf(dir); err != nil || id != l.DirIdent {
		return Bound{}, nil, false
	}
	// The name is one component the host made: never follow it.
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Bound{}, fmt.Errorf("no %q", name), true
		}
		return Bound{}, fmt.Errorf("open %q: %w", name, err), true
	}
	defer unix.Close(fd)
	st, err := statAt(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return Bound{}, fmt.Errorf("stat %q: %w", name, err), true
	}
	return Bound{Mount: st.mount, File: st.ident}, nil, true
}

// fileStat is what statx tells of a file for Reached and Held.
type fileStat struct {
	ident Ident
	mode  uint16
	rdev  uint64
	mount uint64 // 0: the kernel reports no mount id (before Linux 5.8)
}

// statAt statxes path at dirfd with flags, asking for the unique mount id
// (Linux ≥ 6.8); older kernels ignore that bit and report the reusable id.
func statAt(dirfd int, path string, flags int) (fileStat, error) {
	var stx unix.Statx_t
	err := unix.Statx(dirfd, path, flags|unix.AT_STATX_SYNC_AS_STAT,
		unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID|unix.STATX_MNT_ID_UNIQUE, &stx)
	if err != nil {
		return fileStat{}, err
	}
	st := fileStat{
		ident: Ident{Dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), Ino: stx.Ino},
		mode:  stx.Mode,
		rdev:  unix.Mkdev(stx.Rdev_major, stx.Rdev_minor),
	}
	if stx.Mask&(unix.STATX_MNT_ID|unix.STATX_MNT_ID_UNIQUE) != 0 {
		st.mount = stx.Mnt_id
	}
	return st, nil
}

func identOf(f *os.File) (Ident, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Ident{}, fmt.Errorf("stat %q: %w", f.Name(), err)
	}
	return Ident{Dev: st.Dev, Ino: st.Ino}, nil
}

func (i Ident) String() string {
	return fmt.Sprintf("%d:%d inode %d", unix.Major(i.Dev), unix.Minor(i.Dev), i.Ino)
}
