package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

func (g *Grower) grow(t *Table, targetDir, name string, opts GrowOptions) (GrowResult, error) {
	label := name + ".img"
	if g.NS == nil {
		return GrowResult{}, fmt.Errorf("grow %q: no mount namespace to work in", label)
	}
	if err := kubelet.ValidName(name); err != nil {
		return GrowResult{}, fmt.Errorf("grow %q: %w", label, err)
	}
	var res GrowResult
	err := g.NS.Do(func() error {
		var err error
		res, err = g.growInNamespace(t, targetDir, label, opts)
		return err
	})
	return res, err
}

func (g *Grower) growInNamespace(t *Table, targetDir, label string, opts GrowOptions) (GrowResult, error) {
	var res GrowResult
	root, err := isolation.OpenRoot(g.KubeletRoot)
	if err != nil {
		return res, fmt.Errorf("grow %q: %w", label, err)
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, targetDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return res, fmt.Errorf("grow %q: target dir: %w", label, err)
	}
	defer dir.Close()
	target, err := isolation.OpenBeneath(dir, label, isolation.How{Flags: unix.O_PATH})
	if err != nil {
		return res, fmt.Errorf("grow %q: target: %w", label, err)
	}
	defer target.Close()

	info, st, err := mountedImage(t, dir, target)
	if err != nil {
		return res, fmt.Errorf("grow %q: %w", label, err)
	}
	res.FSType, res.Dev = info.FSType, info.Dev()
	res.DiskImageBefore, res.DiskImageAfter = st.Size, st.Size
	usage, err := statfsFile(target)
	if err != nil {
		return res, fmt.Errorf("grow %q: %w", label, err)
	}
	res.FilesystemBefore, res.FilesystemAfter = usage.SizeBytes, usage.SizeBytes

	if growable(info.FSType) && info.Major != 0 {
		if err := g.growFilesystem(&res, info, st.Dev, target, label, opts); err != nil {
			return res, err
		}
		if usage, err = statfsFile(target); err != nil {
			return res, fmt.Errorf("grow %q: %w", label, err)
		}
		res.FilesystemAfter = usage.SizeBytes
	}

	if opts.ExpandDiskImage {
		after, err := growImage(target, st, usage, opts)
		if err != nil {
			return res, fmt.Errorf("grow %q: %w", label, err)
		}
		res.DiskImageAfter = after
		res.ImageGrown = after > res.DiskImageBefore
	}
	return res, nil
}

// mountedImage checks that target is a mount of a regular file that the
// table knows, with its source still linked, and returns that mount.
func mountedImage(t *Table, dir, target *os.File) (*Info, *unix.Stat_t, error) {
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return nil, nil, err
	}
	id, err := isolation.MountID(target)
	if err != nil {
		return nil, nil, err
	}
	if id == dirID {
		return nil, nil, fmt.Errorf("%w: %q is not a mount point", ErrGrowRefused, target.Name())
	}
	info := t.ByID(int(id))
	if info == nil {
		return nil, nil, fmt.Errorf("%w: mount %d on %q is not in the mount table (stale scan?)", ErrGrowRefused, id, target.Name())
	}
	if info.Deleted() {
		return nil, nil, fmt.Errorf("%w: the source of %q (%s[%s]) was deleted", ErrGrowRefused, target.Name(), info.Source, info.Root)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(target.Fd()), &st); err != nil {
		return nil, nil, fmt.Errorf("stat %q: %w", target.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, fmt.Errorf("%w: %q is not a regular file (mode %#o)", isolation.ErrUnsafePath, target.Name(), st.Mode&unix.S_IFMT)
	}
	if st.Dev != unix.Mkdev(info.Major, info.Minor) {
		return nil, nil, fmt.Errorf("%w: %q is on device %d:%d but its mount %d says %s", ErrGrowRefused,
			target.Name(), unix.Major(st.Dev), unix.Minor(st.Dev), id, info.Dev())
	}
	return info, &st, nil
}

func growable(fstype string) bool {
	switch fstype {
	case "ext2", "ext3", "ext4", "xfs":
		return true
	}
	return false
}

func isExt(fstype string) bool { return strings.HasPrefix(fstype, "ext") }

// growFilesystem measures the device and the filesystem and, when the device
// has grown and opts allow, grows the filesystem. It fills res.
func (g *Grower) growFilesystem(res *GrowResult, info *Info, dev uint64, target *os.File, label string, opts GrowOptions) error {
	devFile, devPath, err := g.openDevice(info.Major, info.Minor)
	if err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	defer devFile.Close()
	res.Device = devPath
	if res.DeviceBytes, err = blockDeviceSize(g.SysRoot, info.Major, info.Minor); err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	before, err := ownSize(info.FSType, devFile, target)
	if err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	res.FilesystemBytes = before
	res.NeedsGrowth = NeedsGrowth(res.DeviceBytes, before)
	res.DeviceSmaller = res.DeviceBytes < before
	if !res.NeedsGrowth || !opts.GrowFilesystem {
		return nil
	}
	where := fmt.Sprintf("grow %s on %s (%s) for %q", info.FSType, devPath, info.Dev(), label)
	if readOnly(info) {
		return fmt.Errorf("%s: %w: the filesystem is read-only", where, ErrGrowRefused)
	}
	resizeErr := g.resizeAtPrivateMount(info.FSType, devPath, dev)
	after, err := ownSize(info.FSType, devFile, target)
	if err == nil {
		res.Grown = after > before
	}
	if resizeErr != nil {
		if isExt(info.FSType) && !hasCapSysResource() {
			return fmt.Errorf("%s: %w: %w", where, resizeErr, ErrNoCapSysResource)
		}
		return fmt.Errorf("%s: %w", where, resizeErr)
	}
	if err != nil {
		return fmt.Errorf("%s: after growing: %w", where, err)
	}
	return nil
}

// readOnly reports a read-only superblock. A read-only bind (per-mount "ro")
// does not matter: the private mount is a mount of its own.
func readOnly(info *Info) bool {
	for _, o := range strings.Split(info.SuperOptions, ",") {
		if o == "ro" {
			return true
		}
	}
	return false
}

// resizeAtPrivateMount mounts the device at a fresh directory under
// PrivateDir, checks that the mount reached the filesystem with device number
// dev, runs the resizer and always unmounts again.
func (g *Grower) resizeAtPrivateMount(fstype, devPath string, dev uint64) (err error) {
	if err := preparePrivateDir(g.PrivateDir); err != nil {
		return err
	}
	mp, err := os.MkdirTemp(g.PrivateDir, "grow-")
	if err != nil {
		return fmt.Errorf("private mount point: %w", err)
	}
	defer func() {
		if rmErr := os.Remove(mp); rmErr != nil && err == nil {
			err = fmt.Errorf("remove private mount point %q: %w", mp, rmErr)
		}
	}()
	if err := unix.Mount(devPath, mp, fstype, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount %q on private %q: %w", devPath, mp, err)
	}
	defer func() {
		if umErr := unix.Unmount(mp, 0); umErr != nil {
			// Busy (a resizer child still holds it, say): detach so
			// nothing stays reachable, and report it.
			if detErr := unix.Unmount(mp, unix.MNT_DETACH); detErr != nil && err == nil {
				err = fmt.Errorf("unmount private %q: %w", mp, detErr)
			}
		}
	}()
	var st unix.Stat_t
	if err := unix.Lstat(mp, &st); err != nil {
		return fmt.Errorf("stat private mount %q: %w", mp, err)
	}
	if st.Dev != dev {
		return fmt.Errorf("%w: private mount %q of %q is on %d:%d, not %d:%d", ErrGrowRefused, mp, devPath,
			unix.Major(st.Dev), unix.Minor(st.Dev), unix.Major(dev), unix.Minor(dev))
	}
	r := g.Resizer
	if r == nil {
		r = ExecResizer{}
	}
	return r.Resize(fstype, devPath, mp)
}

// preparePrivateDir creates dir 0700 and makes it a private mount, binding it
// onto itself first if it is not a mount point yet, so that the temporary
// mounts below it reach no peer group: not the launchers, not the agent's own
// container view.
func preparePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("private dir %q: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("private dir %q: %w", dir, err)
	}
	err := unix.Mount("", dir, "", unix.MS_PRIVATE, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet.
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind private dir %q onto itself: %w", dir, err)
		}
		err = unix.Mount("", dir, "", unix.MS_PRIVATE, "")
	}
	if err != nil {
		return fmt.Errorf("make %q a private mount: %w", dir, err)
	}
	return nil
}

// growImage enlarges disk.img to DiskImageSize, sparsely, and never below its
// current size. It returns the size the image has afterwards.
func growImage(target *os.File, st *unix.Stat_t, usage FilesystemUsage, opts GrowOptions) (int64, error) {
	want, err := DiskImageSize(opts.CapacityBytes, opts.FilesystemOverhead, usage.AvailableBytes, st.Blocks*512)
	if err != nil {
		return st.Size, fmt.Errorf("disk image size: %w", err)
	}
	if want <= st.Size {
		return st.Size, nil
	}
	// Reopening the O_PATH descriptor reaches the very inode checked.
	f, err := os.OpenFile(isolation.FdPath(target), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return st.Size, fmt.Errorf("open %q for growth: %w", target.Name(), err)
	}
	defer f.Close()
	var now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &now); err != nil {
		return st.Size, fmt.Errorf("stat %q: %w", target.Name(), err)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return st.Size, fmt.Errorf("%w: %q changed while it was grown", ErrGrowRefused, target.Name())
	}
	if want <= now.Size {
		return now.Size, nil
	}
	if err := unix.Ftruncate(int(f.Fd()), want); err != nil {
		return now.Size, fmt.Errorf("grow %q from %d to %d bytes: %w", target.Name(), now.Size, want, err)
	}
	return want, nil
}

// sweep unmounts what an earlier run left under PrivateDir: a growth whose
// agent was killed between its mount and its unmount leaves the tenant's
// filesystem mounted there, pinning the device so that a later detach or
// NodeUnstage fails with EBUSY.
func (g *Grower) sweep(t *Table) (int, error) {
	if g.NS == nil || g.PrivateDir == "" {
		return 0, nil
	}
	prefix := filepath.Clean(g.PrivateDir) + "/grow-"
	var left []string
	for _, m := range t.Mounts() {
		if strings.HasPrefix(m.MountPoint, prefix) && !strings.Contains(m.MountPoint[len(prefix):], "/") {
			left = append(left, m.MountPoint)
		}
	}
	slices.Sort(left)
	left = slices.Compact(left)
	var errs []error
	err := g.NS.Do(func() error {
		for _, mp := range left {
			for unix.Unmount(mp, unix.MNT_DETACH) == nil {
			}
			if err := os.Remove(mp); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove leftover growth mount point %q: %w", mp, err))
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(left), errors.Join(errs...)
}
