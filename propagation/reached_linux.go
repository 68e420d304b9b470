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

func reached(l Launcher, name string, want Ident) (Sight, error) {
	sight, seenNS := NoView, map[uint64]bool{}
	var notSeen error
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
		case gotErr == nil && got == want:
			return Seen, nil
		}
		sight, notSeen = NotSeen, &NotSeenError{Name: name, Pid: pid, Want: want, Got: got, GotErr: gotErr}
	}
	return sight, notSeen
}

func mountNS(proc string, pid int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(proc, strconv.Itoa(pid), "ns", "mnt"), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// lookInto stats name in the process's view of hotplug-disks. mounts is
// false when the process does not mount the host's hotplug-disks at Dir.
func lookInto(l Launcher, pid int, name string) (got Ident, gotErr error, mounts bool) {
	root, err := os.OpenFile(filepath.Join(l.Proc, strconv.Itoa(pid), "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Ident{}, nil, false
	}
	defer root.Close()
	dir, err := isolation.OpenInRoot(root, l.Dir)
	if err != nil {
		return Ident{}, nil, false
	}
	defer dir.Close()
	if id, err := identOf(dir); err != nil || id != l.DirIdent {
		return Ident{}, nil, false
	}
	// The name is one component the host made: never follow it.
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Ident{}, fmt.Errorf("no %q", name), true
		}
		return Ident{}, fmt.Errorf("open %q: %w", name, err), true
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	got, err = identOf(f)
	return got, err, true
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
