// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxStack bounds the mounts followed down from one entry: a chain longer
// than this is not a stack anyone made, and a loop must not hang the read.
const maxStack = 64

// beneath collects the mounts of one ReadBeneath.
type beneath struct {
	mask  uint64
	buf   *statBuf
	seen  map[uint64]bool
	infos []Info
}

func readBeneath(dir string, also []string) (*Table, error) {
	m, err := mask()
	if err != nil {
		return nil, err
	}
	b := &beneath{mask: m, buf: statBufs.Get().(*statBuf), seen: map[uint64]bool{}}
	defer statBufs.Put(b.buf)
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		// Nothing there, or a path through a symlink: there is no such
		// directory to describe. Whoever then opens it judges why.
		return b.table(also)
	}
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	dirID, err := uniqueID(fd, "")
	if err != nil {
		return nil, fmt.Errorf("mount of %q: %w", dir, err)
	}
	if err := b.add(dirID); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir, err)
	}
	for _, name := range names {
		if err := b.entry(fd, dirID, dir, name); err != nil {
			return nil, err
		}
	}
	return b.table(also)
}

// entryTries bounds how often one entry is read again because a mount on
// it went away between the statx that named it and its statmount.
const entryTries = 8

// entry adds the mounts stacked on dir/name. A mount unmounted while it
// is read (another mounter's unmount, racing) makes the entry be read
// again from the top.
func (b *beneath) entry(fd int, dirID uint64, dir, name string) error {
	for try := 1; ; try++ {
		err := b.entryOnce(fd, dirID, dir, name)
		if !errors.Is(err, unix.ENOENT) || try == entryTries {
			return err
		}
	}
}

// afterLookup, when set, runs between an entry's statx and the
// statmounts that follow it: tests unmount there, as a racing mounter does.
var afterLookup func(name string)

func (b *beneath) entryOnce(fd int, dirID uint64, dir, name string) error {
	id, err := uniqueID(fd, name)
	if afterLookup != nil {
		afterLookup(name)
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil // removed since the listing
	case err != nil:
		// Its filesystem answers nothing: ask the mount by name, which
		// asks that filesystem nothing either, or else find what is
		// mounted there from the directory's side.
		if id, err = handleMountID(fd, name); err != nil {
			return b.at(dirID, filepath.Join(dir, name))
		}
	}
	if id == dirID {
		return nil
	}
	return b.stack(id, dirID)
}

// stack adds the mounts from id down to the one on the directory dirID.
func (b *beneath) stack(id, dirID uint64) error {
	for range maxStack {
		info, err := b.stat(id)
		if err != nil {
			return err
		}
		if info.UniqueParent == dirID || info.UniqueParent == id {
			return nil
		}
		id = info.UniqueParent
	}
	return nil
}

// at adds the mounts whose mount point is where, stacked from the mount
// parent upwards, found by listing instead of asking where: the kernels
// without handleMountID (before 6.12). listmount(2) lists the whole subtree
// of parent, not its children alone, so it is read once, and each mount of
// it costs a statmount: on the pods directory's mount, the node's.
func (b *beneath) at(parent uint64, where string) error {
	under, err := listmount(parent)
	if err != nil {
		return fmt.Errorf("listmount of mount %d: %w", parent, err)
	}
	on := map[uint64]uint64{} // parent → the mount on where above it
	for _, c := range under {
		sm, err := statmount(c, smMntBasic|smMntPoint, b.buf)
		if err != nil {
			continue // unmounted since the listing
		}
		if sm.str(*b.buf, smMntPoint, sm.mntPoint) == where {
			on[sm.mntParentID] = c
		}
	}
	for range maxStack {
		next, ok := on[parent]
		if !ok {
			return nil
		}
		if _, err := b.stat(next); errors.Is(err, unix.ENOENT) {
			return nil // unmounted since
		} else if err != nil {
			return err
		}
		parent = next
	}
	return nil
}

// stat adds the mount with unique id (once) and returns it.
func (b *beneath) stat(id uint64) (Info, error) {
	sm, err := statmount(id, b.mask, b.buf)
	if err != nil {
		return Info{}, fmt.Errorf("statmount of mount %d: %w", id, err)
	}
	info := sm.info(*b.buf)
	if !b.seen[id] {
		b.seen[id] = true
		b.infos = append(b.infos, info)
	}
	return info, nil
}

func (b *beneath) add(id uint64) error {
	_, err := b.stat(id)
	return err
}

// table adds the mounts the paths of also are on and indexes everything.
func (b *beneath) table(also []string) (*Table, error) {
	for _, p := range also {
		id, err := uniqueID(unix.AT_FDCWD, p)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("mount of %q: %w", p, err)
		}
		if err := b.add(id); err != nil {
			return nil, err
		}
	}
	return NewTable(b.infos), nil
}

// uniqueID is the unique id of the mount name (in directory fd; "" for fd
// itself) is on. It asks only cached attributes: a filesystem whose server
// does not answer is not asked.
func uniqueID(fd int, name string) (uint64, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var st unix.Statx_t
	if err := unix.Statx(fd, name, flags, unix.STATX_MNT_ID_UNIQUE, &st); err != nil {
		return 0, err
	}
	if st.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, fmt.Errorf("%w: statx gave no unique mount id", ErrNoStatmount)
	}
	return st.Mnt_id, nil
}

func statFd(fd int) (Info, error) {
	if _, err := mask(); err != nil {
		return Info{}, err
	}
	id, err := uniqueID(fd, "")
	if err != nil {
		return Info{}, fmt.Errorf("mount of fd %d: %w", fd, err)
	}
	return statOne(id)
}
