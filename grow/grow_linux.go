// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
)

func (g *Grower) grow(t *mountinfo.Table, targetDir, label string, opts Options) (Result, error) {
	if g.NS == nil {
		return Result{}, fmt.Errorf("grow %q: no mount namespace to work in", label)
	}
	if err := mount.ValidTarget(label); err != nil {
		return Result{}, fmt.Errorf("grow %q: %w", label, err)
	}
	// The launcher's directory is opened and judged by mount, its one
	// owner, exactly as a bind's is. The growth's own answer travels in
	// the value, so that only a failure to get there is labelled here.
	a := &mount.Attacher{NS: g.NS, KubeletRoot: g.KubeletRoot}
	got, err := mount.InLauncherDirLive(a, t, targetDir, func(live *isolation.Live, dir *os.File) (growth, error) {
		res, err := g.growIn(live, t, dir, label, opts)
		return growth{res, err}, nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("grow %q: %w", label, err)
	}
	return got.res, got.err
}

// growth is one growIn's result and error.
type growth struct {
	res Result
	err error
}

// growIn is one growth, in g.NS, of label in the launcher's directory dir.
// live says whether its caller still waits: a growth given up on (past
// g.NS's deadline, blocked by a frozen filesystem) must not grow anything
// later from what it measured before, past checks its caller made since, so
// live is checked right before each change, after the last wait that a
// freeze can make long.
func (g *Grower) growIn(live *isolation.Live, t *mountinfo.Table, dir *os.File, label string, opts Options) (Result, error) {
	var res Result
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
	usage, err := mount.FilesystemSizeOf(target)
	if err != nil {
		return res, fmt.Errorf("grow %q: %w", label, err)
	}
	res.FilesystemBefore, res.FilesystemAfter = usage.SizeBytes, usage.SizeBytes

	if growable(info.FSType) && info.Major != 0 {
		if err := g.growFilesystem(live, &res, info, st, target, label, opts); err != nil {
			return res, err
		}
		if usage, err = mount.FilesystemSizeOf(target); err != nil {
			return res, fmt.Errorf("grow %q: %w", label, err)
		}
		res.FilesystemAfter = usage.SizeBytes
	}

	if opts.ExpandDiskImage {
		after, err := growImage(live, target, st, usage, opts)
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
func mountedImage(t *mountinfo.Table, dir, target *os.File) (*mountinfo.Info, *unix.Stat_t, error) {
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return nil, nil, err
	}
	id, err := isolation.MountID(target)
	if err != nil {
		return nil, nil, err
	}
	if id == dirID {
		return nil, nil, fmt.Errorf("%w: %q is not a mount point", ErrRefused, target.Name())
	}
	info := t.ByID(int(id))
	if info == nil {
		return nil, nil, fmt.Errorf("%w: mount %d on %q is not in the mount table (stale scan?)", ErrRefused, id, target.Name())
	}
	if info.Deleted() {
		return nil, nil, fmt.Errorf("%w: the source of %q (%s[%s]) was deleted", ErrRefused, target.Name(), info.Source, info.Root)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(target.Fd()), &st); err != nil {
		return nil, nil, fmt.Errorf("stat %q: %w", target.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, fmt.Errorf("%w: %q is not a regular file (mode %#o)", isolation.ErrUnsafePath, target.Name(), st.Mode&unix.S_IFMT)
	}
	if st.Dev != unix.Mkdev(info.Major, info.Minor) {
		return nil, nil, fmt.Errorf("%w: %q is on device %d:%d but its mount %d says %s", ErrRefused,
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
// has grown and opts allow, grows the filesystem. It fills res. st is the
// checked stat of target, the launcher's bind.
func (g *Grower) growFilesystem(live *isolation.Live, res *Result, info *mountinfo.Info, st *unix.Stat_t, target *os.File, label string, opts Options) error {
	devFile, devPath, err := g.openDevice(info.Major, info.Minor)
	if err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	defer devFile.Close()
	res.Device = devPath
	if res.DeviceBytes, err = blockdev.DeviceSize(g.SysRoot, info.Major, info.Minor); err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	// The resize ioctls and xfs's geometry need a descriptor that is not
	// O_PATH; read-only is enough, as for xfs_growfs and resize2fs.
	fsFile, err := reopen(target, st, unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	defer fsFile.Close()
	before, err := geometry(info.FSType, devFile, fsFile)
	if err != nil {
		return fmt.Errorf("grow %q: %w", label, err)
	}
	if res.FilesystemBytes, err = before.bytes(); err != nil {
		return fmt.Errorf("grow %q: filesystem size: %w", label, err)
	}
	res.NeedsGrowth = NeedsGrowth(res.DeviceBytes, res.FilesystemBytes)
	res.DeviceSmaller = res.DeviceBytes < res.FilesystemBytes
	if !res.NeedsGrowth || !opts.GrowFilesystem {
		return nil
	}
	where := fmt.Sprintf("grow %s on %s (%s) for %q", info.FSType, devPath, info.Dev(), label)
	if why := readOnly(info); why != "" {
		return fmt.Errorf("%s: %w: %s", where, ErrRefused, why)
	}
	if err := waitWritable(target, st); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	sent, resizeErr := g.resize(live, info.FSType, devFile, fsFile, res.DeviceBytes)
	after, err := geometry(info.FSType, devFile, fsFile)
	if err == nil {
		res.Grown = sent && after.blocks > before.blocks
	}
	if resizeErr != nil {
		if isExt(info.FSType) && errors.Is(resizeErr, unix.EPERM) && !hasCapSysResource() {
			return fmt.Errorf("%s: %w: %w", where, resizeErr, ErrNoCapSysResource)
		}
		return fmt.Errorf("%s: %w", where, resizeErr)
	}
	if err != nil {
		return fmt.Errorf("%s: after growing: %w", where, err)
	}
	return nil
}

// resize asks the kernel to grow the filesystem holding fsFile (on dev) to
// all of a device of deviceBytes: as many whole blocks as fit. The kernel
// leaves out a tail too small to be a group of its own (xfs: an allocation
// group under 64 blocks; ext4: a block group without room for its
// metadata), as xfs_growfs and resize2fs would. It says whether a call was
// made.
//
// The count sent is absolute, so the filesystem's size is read again here,
// on this thread, right before the call, and a count not above it is never
// sent: another resizer (the kubelet's NodeExpandVolume, an earlier growth)
// may have grown the filesystem since it was measured, and to an xfs that
// can shrink (Linux >= 5.12) a smaller count is a shrink request. A
// filesystem that already holds the blocks needs nothing more. Nor does a
// growth whose caller gave up (live).
func (g *Grower) resize(live *isolation.Live, fstype string, dev, fsFile *os.File, deviceBytes int64) (bool, error) {
	if g.beforeResize != nil {
		g.beforeResize()
	}
	now, err := geometry(fstype, dev, fsFile)
	if err != nil {
		return false, fmt.Errorf("just before resizing: %w", err)
	}
	newBlocks := uint64(deviceBytes) / uint64(now.blockSize)
	if newBlocks <= now.blocks {
		return false, nil
	}
	if err := live.Check(); err != nil {
		return false, fmt.Errorf("not resized from %d to %d blocks: %w", now.blocks, newBlocks, err)
	}
	if isExt(fstype) {
		if err := g.ioctls().ResizeExt4(fsFile, newBlocks); err != nil {
			return true, fmt.Errorf("EXT4_IOC_RESIZE_FS from %d to %d blocks: %w", now.blocks, newBlocks, err)
		}
		return true, nil
	}
	if err := g.ioctls().GrowXFSData(fsFile, newBlocks, now.imaxpct); err != nil {
		return true, fmt.Errorf("XFS_IOC_FSGROWFSDATA from %d to %d blocks: %w", now.blocks, newBlocks, err)
	}
	return true, nil
}

// readOnly says why the filesystem cannot be grown through the launcher's
// bind, or "": a read-only superblock (a ReadOnlyMany claim), or a read-only
// bind, since the kernel takes write access to the filesystem through the
// mount the resize call is made on.
func readOnly(info *mountinfo.Info) string {
	switch {
	case hasOption(info.SuperOptions, "ro"):
		return "the filesystem is read-only"
	case hasOption(info.Options, "ro"):
		return "the launcher's bind is read-only"
	}
	return ""
}

func hasOption(opts, name string) bool {
	return slices.Contains(strings.Split(opts, ","), name)
}

// reopen opens the file that the O_PATH descriptor f holds again, with
// flags, and checks that it is still the inode st describes. It goes through
// f's /proc/self/fd magic link, which names that very file, not a path
// walked again; O_NOFOLLOW cannot be added, since the kernel refuses to open
// a magic link under it (ELOOP).
func reopen(f *os.File, st *unix.Stat_t, flags int) (*os.File, error) {
	r, err := os.OpenFile(isolation.FdPath(f), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %q again: %w", f.Name(), err)
	}
	var now unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &now); err != nil {
		r.Close()
		return nil, fmt.Errorf("stat %q: %w", f.Name(), err)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		r.Close()
		return nil, fmt.Errorf("%w: %q is no longer the file that was checked", ErrRefused, f.Name())
	}
	return r, nil
}

// growImage enlarges disk.img to DiskImageSize, sparsely, and never below its
// current size, unless its caller gave up (live). It returns the size the
// image has afterwards.
func growImage(live *isolation.Live, target *os.File, st *unix.Stat_t, usage mount.FilesystemUsage, opts Options) (int64, error) {
	want, err := mount.DiskImageSize(opts.CapacityBytes, opts.FilesystemOverhead, usage.AvailableBytes, st.Blocks*512)
	if err != nil {
		return st.Size, fmt.Errorf("disk image size: %w", err)
	}
	if want <= st.Size {
		return st.Size, nil
	}
	f, err := reopen(target, st, unix.O_WRONLY)
	if err != nil {
		return st.Size, err
	}
	defer f.Close()
	if err := writable(f); err != nil {
		return st.Size, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &now); err != nil {
		return st.Size, fmt.Errorf("stat %q: %w", target.Name(), err)
	}
	if want <= now.Size {
		return now.Size, nil
	}
	if err := live.Check(); err != nil {
		return now.Size, fmt.Errorf("%q not grown from %d to %d bytes: %w", target.Name(), now.Size, want, err)
	}
	if err := unix.Ftruncate(int(f.Fd()), want); err != nil {
		return now.Size, fmt.Errorf("grow %q from %d to %d bytes: %w", target.Name(), now.Size, want, err)
	}
	return want, nil
}

// waitWritable waits, on a descriptor of target opened for writing, until
// its filesystem takes writes (see writable).
func waitWritable(target *os.File, st *unix.Stat_t) error {
	w, err := reopen(target, st, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer w.Close()
	return writable(w)
}

// writable returns once the filesystem holding f, open for writing, takes
// writes. A write of no bytes waits, as every write does, while the
// filesystem is frozen (fsfreeze, a Longhorn snapshot), and changes nothing,
// not even a timestamp. A resize or truncate made right after it is not
// held by a freeze, so a growth abandoned while frozen finds out it was,
// by its check after this wait, before it changes anything.
func writable(f *os.File) error {
	if _, err := unix.Write(int(f.Fd()), nil); err != nil {
		return fmt.Errorf("wait for the filesystem of %q to take writes: %w", f.Name(), err)
	}
	return nil
}

// sweep unmounts what an older version left under PrivateDir: a growth
// through a second mount whose agent was killed between its mount and its
// unmount left the tenant's filesystem mounted there, pinning the device so
// that a later detach or NodeUnstage fails with EBUSY.
func (g *Grower) sweep(t *mountinfo.Table) (int, error) {
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
	// The errors are the call's own result (see isolation.Call).
	err := g.NS.Do(func() error {
		var errs []error
		for _, mp := range left {
			for unix.Unmount(mp, unix.MNT_DETACH) == nil {
			}
			if err := os.Remove(mp); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove leftover growth mount point %q: %w", mp, err))
			}
		}
		return errors.Join(errs...)
	})
	return len(left), err
}
