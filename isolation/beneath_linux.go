// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openat2Missing is set once the kernel has said it has no openat2, so the
// fallback walk is taken without a failing syscall each time.
var openat2Missing atomic.Bool

// OpenRoot opens a trusted directory, such as the kubelet root, as an O_PATH
// descriptor that later lookups are confined beneath. Symlinks in this path
// are the operator's and are followed. A relative path is refused: it would
// name a different directory in each caller's working directory.
func OpenRoot(path string) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("root %q is not absolute", path)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %q: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenBeneath opens rel beneath the directory root without following any
// symlink, without leaving root, and (with how.SameMount) without crossing a
// mount point. A refusal wraps ErrUnsafePath; a lookup that renames or
// mounts keep racing fails with ErrLookupRaced.
func OpenBeneath(root *os.File, rel string, how How) (*os.File, error) {
	if err := checkRelative(rel); err != nil {
		return nil, fmt.Errorf("open %q beneath %q: %w", rel, root.Name(), err)
	}
	fd, err := openBeneath(int(root.Fd()), rel, how)
	if err != nil {
		return nil, fmt.Errorf("open %q beneath %q: %w", rel, root.Name(), classify(err))
	}
	if how.Flags&unix.O_PATH != 0 {
		// O_PATH|O_NOFOLLOW hands back the symlink itself rather than
		// failing; a link is never what a caller asked for.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			// Not a refusal: a filesystem that answers only I/O errors
			// (shut down, its device gone) fails here, and must be
			// reported as what it is, not as tenant content.
			unix.Close(fd)
			return nil, fmt.Errorf("stat %q beneath %q: %w", rel, root.Name(), err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return nil, fmt.Errorf("open %q beneath %q: %w: the last component is a symlink", rel, root.Name(), ErrUnsafePath)
		}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root.Name(), rel)), nil
}

func checkOpenat2() error {
	fd, err := openat2Syscall(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("openat2: %w: %w", errors.ErrUnsupported, err)
	}
	if err != nil {
		return fmt.Errorf("openat2: %w", err)
	}
	return unix.Close(fd)
}

func openBeneath(dirfd int, rel string, how How) (int, error) {
	if !openat2Missing.Load() {
		fd, err := openat2(dirfd, rel, how)
		if !errors.Is(err, unix.ENOSYS) {
			return fd, err
		}
		openat2Missing.Store(true)
	}
	return walkBeneath(dirfd, rel, how)
}

func openat2(dirfd int, rel string, how How) (int, error) {
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS)
	if how.SameMount {
		resolve |= unix.RESOLVE_NO_XDEV
	}
	oh := unix.OpenHow{
		Flags:   uint64(how.Flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: resolve,
	}
	if how.Flags&unix.O_CREAT != 0 {
		oh.Mode = uint64(how.Mode)
	}
	return retryOpenat2(dirfd, rel, &oh)
}

// maxLookupRetries bounds the retries of one lookup that the kernel
// answered EAGAIN. A racing rename or mount is rare and brief; one that
// comes back this many times in a row is a loop, which would otherwise
// hold the lookup, and the thread it runs on, forever.
const maxLookupRetries = 16

// openat2Syscall is unix.Openat2; tests replace it to make the kernel's
// answers.
var openat2Syscall = unix.Openat2

// retryOpenat2 is openat2, retried on EINTR and, up to maxLookupRetries
// times, on EAGAIN: a rename or mount raced a lookup confined to a root
// (RESOLVE_BENEATH, RESOLVE_IN_ROOT) and the kernel asks for a retry
// rather than risk an escape. Past that it fails with ErrLookupRaced.
func retryOpenat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for raced := 0; ; {
		fd, err := openat2Syscall(dirfd, path, how)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if raced++; raced < maxLookupRetries {
				continue
			}
			return -1, fmt.Errorf("%w: the kernel asked %d times in a row to retry (%w)", ErrLookupRaced, raced, err)
		}
		return fd, err
	}
}

// walkBeneath is the fallback for kernels without openat2 (before 5.6): each
// component is opened with O_NOFOLLOW relative to the previous one, so a
// symlink anywhere fails with ELOOP (or ENOTDIR for an intermediate one).
func walkBeneath(dirfd int, rel string, how How) (int, error) {
	parts := strings.Split(rel, "/")
	rootMnt, err := mountIDOf(dirfd)
	if how.SameMount && err != nil {
		return -1, err
	}
	cur := dirfd
	closeCur := func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}
	for i, name := range parts {
		last := i == len(parts)-1
		flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		mode := uint32(0)
		if last {
			flags = how.Flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
			mode = how.Mode
		}
		next, err := unix.Openat(cur, name, flags, mode)
		closeCur()
		if err != nil {
			return -1, err
		}
		cur = next
		if how.SameMount {
			id, err := mountIDOf(cur)
			if err != nil {
				closeCur()
				return -1, err
			}
			if id != rootMnt {
				closeCur()
				return -1, unix.EXDEV
			}
		}
	}
	return cur, nil
}

func checkRelative(rel string) error {
	if rel == "" || strings.HasPrefix(rel, "/") {
		return fmt.Errorf("%w: not a relative path", ErrUnsafePath)
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return fmt.Errorf("%w: contains NUL", ErrUnsafePath)
	}
	for _, p := range strings.Split(rel, "/") {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("%w: component %q", ErrUnsafePath, p)
		}
	}
	return nil
}

// classify marks the errors by which the kernel refuses an unsafe lookup.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: a component is a symlink: %w", ErrUnsafePath, err)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: leaves its root or crosses a mount point: %w", ErrUnsafePath, err)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: a parent is not a directory: %w", ErrUnsafePath, err)
	}
	return err
}

// MountID returns the id of the mount that f lives on, as in the first field
// of mountinfo. For a mount point, that is the mount on top of it.
func MountID(f *os.File) (uint64, error) {
	id, err := mountIDOf(int(f.Fd()))
	if err != nil {
		return 0, fmt.Errorf("mount id of %q: %w", f.Name(), err)
	}
	return id, nil
}

func mountIDOf(fd int) (uint64, error) {
	var stx unix.Statx_t
	err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx)
	if err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, fmt.Errorf("kernel did not report a mount id: %w", unix.ENOTSUP)
	}
	return stx.Mnt_id, nil
}

// FileKind names the file type in mode for refusals and reports, e.g.
// "regular file", "symlink", "block device".
func FileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "unix socket"
	}
	return "file of unknown type"
}

// OpenInRoot opens path as a process whose root directory is root sees it
// (openat2 with RESOLVE_IN_ROOT): symlinks are followed but resolved inside
// root, ".." stops at root and magic links are refused, so a path inside a
// container's root (/proc/<pid>/root) never reaches the host's files. The
// result is an O_PATH descriptor: nothing is opened for reading or
// writing, and a FIFO or device found there is not touched. Kernels
// without openat2 get an error wrapping errors.ErrUnsupported; a lookup
// that renames or mounts keep racing fails with ErrLookupRaced.
func OpenInRoot(root *os.File, path string) (*os.File, error) {
	oh := unix.OpenHow{
		Flags:   uint64(unix.O_PATH | unix.O_CLOEXEC),
		Resolve: uint64(unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS),
	}
	fd, err := retryOpenat2(int(root.Fd()), path, &oh)
	switch {
	case errors.Is(err, unix.ENOSYS):
		return nil, fmt.Errorf("open %q in root %q: %w", path, root.Name(), errors.ErrUnsupported)
	case err != nil:
		return nil, fmt.Errorf("open %q in root %q: %w", path, root.Name(), err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(root.Name(), path)), nil
}

// ReadFileBeneath reads the regular file name in the trusted directory
// dir, without following a symlink or leaving dir: its first limit bytes
// (a caller that refuses longer files reads one more). A missing dir or
// file wraps fs.ErrNotExist. The open does not block (a FIFO put there
// would hold the caller's thread forever), and anything but a regular
// file is refused.
func ReadFileBeneath(dir, name string, limit int64) ([]byte, error) {
	root, err := OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := OpenBeneath(root, name, How{Flags: unix.O_RDONLY | unix.O_NONBLOCK})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %q: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("read %q: %w: a %s, not a regular file", f.Name(), ErrUnsafePath, FileKind(st.Mode))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", f.Name(), err)
	}
	return b, nil
}
