// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// dirSource is a validated volume directory, held open as O_PATH.
type dirSource struct {
	f  *os.File
	st unix.Stat_t
}

func (a *Attacher) attachDir(t *mountinfo.Table, sourceDir, targetDir, file string) (outcome.Result, error) {
	if err := ValidTarget(file); err != nil {
		return "", fmt.Errorf("attach directory to %q: %w", filepath.Join(a.KubeletRoot, targetDir), err)
	}
	return inHost(a, func(s steps) (outcome.Result, error) { return a.attachDirHere(s, t, sourceDir, targetDir, file) })
}

func (a *Attacher) attachDirHere(s steps, t *mountinfo.Table, sourceDir, targetDir, file string) (outcome.Result, error) {
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return "", err
	}
	defer root.Close()
	src, err := openDirSource(root, sourceDir)
	if err != nil {
		return "", err
	}
	defer src.f.Close()
	dir, dirID, err := openTargetDir(t, root, targetDir)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	return settleTwice(func() (outcome.Result, error) { return a.settleDir(s, t, src, dir, dirID, file) })
}

// settleDir is settleFile for a directory volume.
func (a *Attacher) settleDir(s steps, t *mountinfo.Table, src *dirSource, dir *os.File, dirID uint64, file string) (outcome.Result, error) {
	tg, err := claimTarget(func() (target, error) { return inspectDirTarget(t, dir, dirID, file) },
		func() error { return createTargetDir(s, dir, file) })
	if err != nil {
		return "", err
	}
	result := outcome.Mounted
	switch {
	case tg.mounted && !tg.dead && tg.depth <= 1 && tg.st.Dev == src.st.Dev && tg.st.Ino == src.st.Ino:
		return outcome.Unchanged, a.chownDir(s, dir, file, tg.st)
	case tg.mounted && !tg.dead && tg.st.Dev == src.st.Dev && tg.st.Ino == src.st.Ino && sameBeneath(t, tg):
		return peelToOne(s, t, dir, tg, file, func() (outcome.Result, error) { return a.settleDir(s, t, src, dir, dirID, file) })
	case tg.mounted:
		if _, err := peel(s, t, dir, dirID, file); err != nil {
			return "", err
		}
		result = outcome.Replaced
	}
	if err := bindDir(s, src, dir, dirID, file); err != nil {
		return result, fmt.Errorf("bind %q onto %q: %w", src.f.Name(), filepath.Join(dir.Name(), file), err)
	}
	return result, a.chownMountedDir(s, src, dir, dirID, file)
}

// createTargetDir makes the empty directory to mount on, exclusively, as
// createTarget makes a file.
func createTargetDir(s steps, dir *os.File, file string) error {
	if err := s.next("create target directory"); err != nil {
		return err
	}
	if err := unix.Mkdirat(int(dir.Fd()), file, 0o750); err != nil {
		return fmt.Errorf("create target directory %q: %w", filepath.Join(dir.Name(), file), err)
	}
	return nil
}

// openDirSource opens the published volume directory beneath the kubelet
// root, refusing symlinks on the way.
func openDirSource(root *os.File, sourceDir string) (*dirSource, error) {
	f, err := isolation.OpenBeneath(root, sourceDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return nil, fmt.Errorf("volume directory: %w", err)
	}
	src := &dirSource{f: f}
	if err := unix.Fstat(int(f.Fd()), &src.st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat volume directory %q: %w", f.Name(), err)
	}
	return src, nil
}

// inspectDirTarget says what is at dir/file for a directory volume. A
// target that is not a directory, or an unmounted one that is not an empty
// root-owned directory, is refused.
//
// A bind another mounter (virt-handler's) makes on an empty target between
// the look and the read of its entries is no error of the target's: the
// directory is looked at once more, and is then seen mounted. Without
// that, a launcher's observation failed whole on the race.
func inspectDirTarget(t *mountinfo.Table, dir *os.File, dirID uint64, file string) (target, error) {
	tg, err := inspectDirOnce(t, dir, dirID, file)
	if errors.Is(err, ErrTargetChanged) {
		return inspectDirOnce(t, dir, dirID, file)
	}
	return tg, err
}

func inspectDirOnce(t *mountinfo.Table, dir *os.File, dirID uint64, file string) (target, error) {
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
		stack := t.At(where)
		tg.mounted, tg.dead, tg.depth = true, true, len(stack)
		if len(stack) > 0 {
			tg.top = stack[len(stack)-1]
		}
		return tg, nil
	}
	if kind := isolation.FileKind(tg.st.Mode); kind != "directory" {
		return tg, fmt.Errorf("target %q: %w: is a %s, not a directory", where, isolation.ErrUnsafePath, kind)
	}
	if tg.id, err = isolation.MountID(f); err != nil {
		return tg, err
	}
	if tg.id != dirID {
		tg.mounted = true
		tg.top, tg.depth = stackOn(t, tg.id, dirID)
		return tg, nil
	}
	if afterDirTargetOpen != nil {
		afterDirTargetOpen(where)
	}
	if err := emptyRootOwned(dir, dirID, file, tg.st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Removed since it was opened: virt-handler removes its
			// own target directories, and racing it is the normal case
			// at the end of a migration. Nothing is there, as above.
			return target{}, nil
		}
		return tg, fmt.Errorf("target %q: %w", where, err)
	}
	return tg, nil
}

// afterDirTargetOpen, when set, runs between a directory target's open and
// its emptiness check: tests remove the directory there, as a peer's
// cleanup does.
var afterDirTargetOpen func(where string)

// emptyRootOwned refuses an unmounted target directory the agent cannot
// have left: one with content, or not owned by root. The launcher can
// write into hotplug-disks; what it made there is not mounted over.
func emptyRootOwned(dir *os.File, dirID uint64, file string, st unix.Stat_t) error {
	if st.Uid != 0 {
		return fmt.Errorf("%w: an unmounted directory owned by uid %d, not made by the agent", isolation.ErrUnsafePath, st.Uid)
	}
	empty, err := dirEmpty(dir, dirID, file)
	if err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("%w: an unmounted directory with content, not made by the agent", isolation.ErrUnsafePath)
	}
	return nil
}

// dirEmpty reads at most one entry of dir/file, never following a link.
// The directory is opened again to be read, so it must still be on the
// directory's mount: another mounter's bind made since (virt-handler's of
// the same claim) would show the claim's content (ErrTargetChanged).
func dirEmpty(dir *os.File, dirID uint64, file string) (bool, error) {
	fd, err := unix.Openat(int(dir.Fd()), file, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open %q: %w", filepath.Join(dir.Name(), file), err)
	}
	d := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), file))
	defer d.Close()
	if err := onDirMount(d, dirID); err != nil {
		return false, err
	}
	names, err := d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// bindDir mounts the source directory onto dir/file, which must then have
// nothing mounted on it, by the rule file binds follow too (bindPrivate):
// only the volume's own mount, submounts stay behind, and the bind leaves
// the peer group of the kubelet's volume mount, so that a mount made
// inside the PVC later does not follow it into the launcher.
func bindDir(s steps, src *dirSource, dir *os.File, dirID uint64, file string) error {
	fd, err := unix.Openat(int(dir.Fd()), file, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open target: %w", err)
	}
	tf := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), file))
	defer tf.Close()
	if err := onDirMount(tf, dirID); err != nil {
		return err
	}
	if err := s.next("bind"); err != nil {
		return err
	}
	return bindPrivate(src.f, dir, file, tf)
}

// chownMountedDir checks that dir/file now shows the source directory and
// gives it to the QEMU user.
func (a *Attacher) chownMountedDir(s steps, src *dirSource, dir *os.File, dirID uint64, file string) error {
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
	if id == dirID || st.Dev != src.st.Dev || st.Ino != src.st.Ino {
		return fmt.Errorf("target %q does not show %q after mounting", where, src.f.Name())
	}
	return a.chown(s, f, st)
}

// chownDir gives an already correct mount to the QEMU user if it is not
// theirs yet (a crash between mount and chown).
func (a *Attacher) chownDir(s steps, dir *os.File, file string, st unix.Stat_t) error {
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

func (a *Attacher) detachDir(t *mountinfo.Table, targetDir, file string) (outcome.Result, error) {
	if err := ValidTarget(file); err != nil {
		return "", fmt.Errorf("detach directory from %q: %w", filepath.Join(a.KubeletRoot, targetDir), err)
	}
	return inHost(a, func(s steps) (outcome.Result, error) { return a.detachDirHere(s, t, targetDir, file) })
}

func (a *Attacher) detachDirHere(s steps, t *mountinfo.Table, targetDir, file string) (outcome.Result, error) {
	dir, dirID, err := a.existingTargetDir(t, targetDir)
	if err != nil || dir == nil {
		return outcome.Unchanged, err
	}
	defer dir.Close()
	where := filepath.Join(dir.Name(), file)
	tg, err := inspectDirTarget(t, dir, dirID, file)
	if err != nil && !(tg.exists && !tg.mounted && errors.Is(err, isolation.ErrUnsafePath) && tg.st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		return "", err
	}
	if !tg.exists {
		return outcome.Unchanged, nil
	}
	n, err := peel(s, t, dir, dirID, file)
	if err != nil {
		return "", err
	}
	if err := s.next("remove target directory"); err != nil {
		return "", fmt.Errorf("remove target directory %q: %w", where, err)
	}
	err = unix.Unlinkat(int(dir.Fd()), file, unix.AT_REMOVEDIR)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return outcome.Removed, nil
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		// Not the agent's content: only the mount was.
		if n > 0 {
			return outcome.Removed, nil
		}
		return outcome.Unchanged, nil
	}
	return "", fmt.Errorf("remove target directory %q: %w", where, err)
}

func (a *Attacher) observeDirs(t *mountinfo.Table, targetDir string, list Lister) ([]Observed, error) {
	return inHost(a, func(steps) ([]Observed, error) { return a.observeDirsHere(t, targetDir, list) })
}

func (a *Attacher) observeDirsHere(t *mountinfo.Table, targetDir string, list Lister) ([]Observed, error) {
	dir, dirID, err := a.existingTargetDir(t, targetDir)
	if err != nil || dir == nil {
		return nil, err
	}
	defer dir.Close()
	entries, err := list(dir)
	if err != nil {
		return nil, err
	}
	var out []Observed
	for _, e := range entries {
		if !e.IsDir() || ValidTarget(e.Name()) != nil {
			continue
		}
		tg, err := inspectDirTarget(t, dir, dirID, e.Name())
		if err != nil {
			if ignoreUnsafe(err) != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			continue // gone, or the launcher's own directory
		}
		if tg.exists {
			out = append(out, a.describeDir(tg, e.Name()))
		}
	}
	return out, nil
}

// describeDir turns what inspectDirTarget found into an Observed.
func (a *Attacher) describeDir(tg target, name string) Observed {
	o := Observed{Name: name, Mounted: tg.mounted}
	if !tg.mounted {
		return o
	}
	o.Depth, o.Stacked, o.SourceGone = max(tg.depth, 1), tg.depth > 1, tg.dead
	o.MountID = int(tg.id)
	major, minor := unix.Major(tg.st.Dev), unix.Minor(tg.st.Dev)
	if tg.top != nil {
		o.MountID, o.Root = tg.top.ID, tg.top.Root
		o.SourceGone = o.SourceGone || tg.top.Deleted()
		major, minor = tg.top.Major, tg.top.Minor
	}
	o.Dev = fmt.Sprintf("%d:%d", major, minor)
	if major != 0 && !o.SourceGone {
		o.SourceGone = BlockDeviceGone(a.sysRoot(), major, minor)
	}
	return o
}
