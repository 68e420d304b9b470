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
	return a.attachIn(s, t, targetDir, file, func(root *os.File) (binding, error) {
		src, err := openDirSource(root, sourceDir)
		if err != nil {
			return binding{}, err
		}
		return dirBinding(src), nil
	})
}

// dirBinding binds a volume directory onto a directory.
func dirBinding(src *dirSource) binding {
	return binding{src: src.f, st: src.st, shows: src.shownBy,
		look: inspectDirTarget, create: createTargetDir, open: openDirToBind}
}

// shownBy reports that the mount on the target is a live bind of the
// volume directory: the same directory, on a filesystem that answers.
func (src *dirSource) shownBy(tg target) bool {
	return !tg.dead && tg.st.Dev == src.st.Dev && tg.st.Ino == src.st.Ino
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
	tg, err := lookTarget(t, dir, dirID, file, "directory")
	if err != nil || !tg.exists || tg.mounted {
		return tg, err
	}
	where := filepath.Join(dir.Name(), file)
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

// openDirToBind opens dir/file, a directory, to bind a volume directory
// onto. The bind follows the rule of file binds (bindPrivate): only the
// volume's own mount, submounts stay behind, and the bind leaves the peer
// group of the kubelet's volume mount, so that a mount made inside the PVC
// later does not follow it into the launcher.
func openDirToBind(dir *os.File, file string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), file, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open target: %w", err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), file)), nil
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
