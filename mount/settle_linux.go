// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// One settling for both kinds of bind: a filesystem volume's disk.img onto
// a regular file, a directory volume's root onto a directory. What differs
// is how a kind looks at its target, makes a missing one, opens it to bind
// onto, and what counts as already showing its source; a binding carries
// those, and every rule of the settling itself is written here once.

// binding is one bind to settle: its source, held open as O_PATH, with the
// source's stat, and its kind's own steps.
type binding struct {
	src *os.File
	st  unix.Stat_t
	// shows reports that the mount on a target is a live bind of src.
	shows func(tg target) bool
	// look says what is at dir/file; create makes an empty target there,
	// exclusively.
	look   func(t *mountinfo.Table, dir *os.File, dirID uint64, file string) (target, error)
	create func(s steps, dir *os.File, file string) error
	// open opens dir/file, as O_PATH, to bind onto, refusing what the
	// kind cannot be bound onto.
	open func(dir *os.File, file string) (*os.File, error)
}

// attachIn opens the kubelet root, the source beneath it (open) and the
// launcher's directory targetDir, and settles the bind of the source onto
// file there: the one course of a file and a directory attach.
func (a *Attacher) attachIn(s steps, t *mountinfo.Table, targetDir, file string, open func(root *os.File) (binding, error)) (outcome.Result, error) {
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return "", err
	}
	defer root.Close()
	b, err := open(root)
	if err != nil {
		return "", err
	}
	defer b.src.Close()
	dir, dirID, err := openTargetDir(t, root, targetDir)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	return settleTwice(func() (outcome.Result, error) { return a.settle(s, t, b, dir, dirID, file) })
}

// settle looks at the target of b in dir, judges it and binds b's source
// there unless it is already bound. A failed bind reports what it set out
// to do (mounted or replaced) with its error.
func (a *Attacher) settle(s steps, t *mountinfo.Table, b binding, dir *os.File, dirID uint64, file string) (outcome.Result, error) {
	tg, err := claimTarget(func() (target, error) { return b.look(t, dir, dirID, file) },
		func() error { return b.create(s, dir, file) })
	if err != nil {
		return "", err
	}
	result := outcome.Mounted
	switch {
	case tg.mounted && b.shows(tg) && tg.depth <= 1:
		return outcome.Unchanged, a.fixOwner(s, dir, file, tg.st)
	case tg.mounted && b.shows(tg) && sameBeneath(t, tg):
		return peelToOne(s, t, dir, tg, file, func() (outcome.Result, error) { return a.settle(s, t, b, dir, dirID, file) })
	case tg.mounted:
		if _, err := peel(s, t, dir, dirID, file); err != nil {
			return "", err
		}
		result = outcome.Replaced
	}
	if err := b.bind(s, dir, dirID, file); err != nil {
		return result, fmt.Errorf("bind %q onto %q: %w", b.src.Name(), filepath.Join(dir.Name(), file), err)
	}
	return result, a.chownMounted(s, b, dir, dirID, file)
}

// bind mounts b's source onto dir/file, which must then have nothing
// mounted on it (onDirMount), and only while the caller still waits.
func (b binding) bind(s steps, dir *os.File, dirID uint64, file string) error {
	tf, err := b.open(dir, file)
	if err != nil {
		return err
	}
	defer tf.Close()
	if err := onDirMount(tf, dirID); err != nil {
		return err
	}
	if err := s.next("bind"); err != nil {
		return err
	}
	return bindPrivate(b.src, dir, file, tf)
}

// lookTarget says what is at dir/file: nothing, a mount whose filesystem
// is dead, or a want ("regular file", "directory") on the directory's own
// mount or with mounts on it. Anything else is refused. The fd it used is
// closed again, since an open fd on a mount would make unmounting it fail
// with EBUSY.
func lookTarget(t *mountinfo.Table, dir *os.File, dirID uint64, file, want string) (target, error) {
	var tg target
	where := filepath.Join(dir.Name(), file)
	f, err := openTarget(dir, file)
	if errors.Is(err, unix.ENOENT) {
		return tg, nil
	}
	if err != nil {
		return tg, fmt.Errorf("open target %q: %w", where, err)
	}
	defer f.Close()
	tg.exists = true
	if tg.st, err = lookAt(f); err != nil {
		if !deadSource(err) {
			return tg, fmt.Errorf("stat target %q: %w", where, err)
		}
		// Only a mount's filesystem can go dead under a target the agent
		// made in the launcher's directory.
		stack := t.At(where)
		tg.mounted, tg.dead, tg.depth = true, true, len(stack)
		if len(stack) > 0 {
			tg.top = stack[len(stack)-1]
		}
		return tg, nil
	}
	if kind := isolation.FileKind(tg.st.Mode); kind != want {
		return tg, fmt.Errorf("target %q: %w: is a %s, not a %s", where, isolation.ErrUnsafePath, kind, want)
	}
	if tg.id, err = isolation.MountID(f); err != nil {
		return tg, err
	}
	if tg.id != dirID {
		tg.mounted = true
		tg.top, tg.depth = stackOn(t, tg.id, dirID)
	}
	return tg, nil
}

// chownMounted checks that dir/file now shows b's source and gives it to
// the QEMU user.
func (a *Attacher) chownMounted(s steps, b binding, dir *os.File, dirID uint64, file string) error {
	where := filepath.Join(dir.Name(), file)
	f, err := openTarget(dir, file)
	if err != nil {
		return fmt.Errorf("open mounted target %q: %w", where, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat mounted target %q: %w", where, err)
	}
	id, err := isolation.MountID(f)
	if err != nil {
		return err
	}
	if id == dirID || st.Dev != b.st.Dev || st.Ino != b.st.Ino {
		return fmt.Errorf("target %q does not show %q after mounting", where, b.src.Name())
	}
	return a.chown(s, f, st)
}

// fixOwner gives an already correct mount, whose target's stat is st, to
// the QEMU user if it is not already theirs (a crash between mount and
// chown).
func (a *Attacher) fixOwner(s steps, dir *os.File, file string, st unix.Stat_t) error {
	uid, gid := a.qemuIDs()
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	f, err := openTarget(dir, file)
	if err != nil {
		return fmt.Errorf("open mounted target %q: %w", filepath.Join(dir.Name(), file), err)
	}
	defer f.Close()
	return a.chown(s, f, st)
}
