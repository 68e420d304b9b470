// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/internal/sandbox"
	"github.com/hpmount/hpmount/mountinfo"
)

// stage attaches v's backing file and, for a filesystem volume, mounts it
// at the staging path, making the filesystem first on a blank device. It
// sets v.Device. Staging again what is staged changes nothing.
func stage(v *volume) error {
	if _, err := os.Stat(v.BackingFile); err != nil {
		return status.Errorf(codes.NotFound, "volume %q: backing file: %v", v.ID, err)
	}
	dev, err := attachLoop(v.BackingFile, v.Access == AccessFilesystem)
	if err != nil {
		return err
	}
	// For a filesystem volume the mount holds the autoclear device from
	// here on; closing it earlier would detach it.
	defer dev.Close()
	v.Device = dev.Name()
	if err := os.MkdirAll(v.StagingPath, 0o750); err != nil {
		return fmt.Errorf("create staging path %q: %w", v.StagingPath, err)
	}
	if v.Access == AccessBlock {
		return nil
	}
	rdev, err := deviceNumber(v.Device)
	if err != nil {
		return err
	}
	if top, err := topMount(v.StagingPath); err != nil || top != nil {
		return mountedFrom(top, err, v.StagingPath, rdev)
	}
	if err := ensureFilesystem(v.Device, v.FSType); err != nil {
		return err
	}
	if err := unix.Mount(v.Device, v.StagingPath, v.FSType, 0, ""); err != nil {
		return fmt.Errorf("mount %s (%s) on %q: %w", v.Device, v.FSType, v.StagingPath, err)
	}
	return nil
}

// ensureFilesystem makes fsType on a blank device and refuses a device
// holding anything else.
func ensureFilesystem(dev, fsType string) error {
	found, err := sandbox.Run("blkid", "-p", "-o", "value", "-s", "TYPE", dev)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 2: // nothing found: blank
		return sandbox.Mkfs(dev, fsType)
	case err != nil:
		return err
	case found != fsType:
		return status.Errorf(codes.FailedPrecondition, "%s holds %q, not %s", dev, found, fsType)
	}
	return nil
}

// publish bind-mounts the staging mount onto target (a directory it
// creates), or for a block volume the loop device node onto target (a
// file it creates). Publishing again what is published changes nothing.
func publish(v volume, target string, readonly bool) error {
	devs, err := loopsOf(v.BackingFile)
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %q: %q is attached to no loop device: stage it again", v.ID, v.BackingFile)
	}
	rdev, err := deviceNumber(devs[0])
	if err != nil {
		return err
	}
	if v.Access == AccessBlock {
		return publishBlock(devs[0], rdev, target, readonly)
	}
	return publishFilesystem(v, devs[0], rdev, target, readonly)
}

func publishFilesystem(v volume, dev string, rdev uint64, target string, readonly bool) error {
	if top, err := topMount(target); err != nil || top != nil {
		return mountedFrom(top, err, target, rdev)
	}
	// Binding a staging directory whose mount is gone would publish an
	// empty directory of the node's own filesystem.
	staged, err := topMount(v.StagingPath)
	if err != nil {
		return err
	}
	if staged == nil || unix.Mkdev(staged.Major, staged.Minor) != rdev {
		return status.Errorf(codes.FailedPrecondition, "volume %q: %s is not mounted at staging path %q: stage it again", v.ID, dev, v.StagingPath)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return fmt.Errorf("create target %q: %w", target, err)
	}
	return bind(v.StagingPath, target, readonly)
}

func publishBlock(dev string, rdev uint64, target string, readonly bool) error {
	top, err := topMount(target)
	if err != nil {
		return err
	}
	if top != nil {
		var st unix.Stat_t
		if err := unix.Stat(target, &st); err != nil {
			return fmt.Errorf("stat %q: %w", target, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == rdev {
			return nil
		}
		return status.Errorf(codes.FailedPrecondition, "%q has another mount on it, not %s", target, dev)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("create the directory of %q: %w", target, err)
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return fmt.Errorf("create publish file %q: %w", target, err)
	}
	f.Close()
	return bind(dev, target, readonly)
}

func bind(source, target string, readonly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %q on %q: %w", source, target, err)
	}
	if !readonly {
		return nil
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return fmt.Errorf("make %q read-only: %w", target, err)
	}
	return nil
}

// unpublish unmounts target and removes it, as the spec asks of the
// plugin that created it; a target already gone is success.
func unpublish(target string) error {
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove target %q: %w", target, err)
	}
	return nil
}

// unmountAll unmounts path until nothing is mounted there; a path that is
// not a mount point, or does not exist, is success.
func unmountAll(path string) error {
	for range 16 {
		err := unix.Unmount(path, 0)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %q: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %q: still mounted after 16 unmounts", path)
}

// expand has the loop device pick up its backing file's size and, for a
// filesystem volume, grows the filesystem to it. It returns the device's
// size.
func expand(v volume, volumePath string, required int64) (int64, error) {
	dev, err := refreshCapacity(v.BackingFile)
	if errors.Is(err, errNoLoop) {
		return 0, status.Errorf(codes.NotFound, "volume %q: %v", v.ID, err)
	}
	if err != nil {
		return 0, err
	}
	rdev, err := deviceNumber(dev)
	if err != nil {
		return 0, err
	}
	size, err := blockdev.DeviceSize("/sys", unix.Major(rdev), unix.Minor(rdev))
	if err != nil {
		return 0, err
	}
	if required > size {
		return 0, outOfRange(dev, size, required)
	}
	if v.Access == AccessBlock {
		return size, nil
	}
	return size, growFilesystem(v, dev, rdev, volumePath)
}

// growFilesystem grows v's mounted filesystem online: xfs_growfs on a
// mount of it, resize2fs on the device. Online ext4 growth needs
// CAP_SYS_RESOURCE; without it resize2fs fails ("Permission denied to
// resize filesystem") and the error wraps unix.EPERM and says why.
func growFilesystem(v volume, dev string, rdev uint64, volumePath string) error {
	var err error
	switch v.FSType {
	case "xfs":
		at := v.StagingPath
		if top, terr := topMount(volumePath); terr == nil && top != nil && unix.Mkdev(top.Major, top.Minor) == rdev {
			at = volumePath
		}
		_, err = sandbox.Run("xfs_growfs", at)
	case "ext4":
		_, err = sandbox.Run("resize2fs", dev)
		if err != nil && strings.Contains(err.Error(), "Permission denied to resize") {
			err = fmt.Errorf("online growth refused, %w (EXT4_IOC_RESIZE_FS needs CAP_SYS_RESOURCE): %w", unix.EPERM, err)
		}
	default:
		err = fmt.Errorf("no way to grow %q", v.FSType)
	}
	if err != nil {
		return fmt.Errorf("grow the %s filesystem of volume %q on %s: %w", v.FSType, v.ID, dev, err)
	}
	return nil
}

func deviceNumber(dev string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", dev, err)
	}
	return st.Rdev, nil
}

// topMount returns what a lookup of path reaches if path is a mount point
// of this mount namespace, else nil. A missing path is no mount point.
func topMount(path string) (*mountinfo.Info, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", path, err)
	}
	table, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	top, _ := table.Top(resolved)
	return top, nil
}

// mountedFrom judges a path that has a mount on it: the device's
// filesystem is success (the call was made before), anything else is
// refused rather than stacked on.
func mountedFrom(top *mountinfo.Info, err error, path string, rdev uint64) error {
	if err != nil {
		return err
	}
	if unix.Mkdev(top.Major, top.Minor) == rdev {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%q has %s (%s) mounted on it, not %d:%d",
		path, top.Source, top.Dev(), unix.Major(rdev), unix.Minor(rdev))
}

// GrowBackingFile is the storage backend's side of a resize: it grows the
// file to size bytes (never shrinks it) and has every loop device over it
// pick up the new size, as a SAN would grow a LUN. Growing the filesystem
// is NodeExpandVolume's job, or hpmount's after the volume was unstaged.
func GrowBackingFile(path string, size int64) error {
	if err := growBackingFile(path, size); err != nil {
		return fmt.Errorf("grow backing file %q: %w", path, err)
	}
	return nil
}
