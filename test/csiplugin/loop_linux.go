// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// sysBlock is where the kernel lists block devices; each attached loop
// device has loop/backing_file there.
const sysBlock = "/sys/block"

// attachedLoops maps every attached loop device (a /dev path) to its
// backing file, as sysfs names it.
func attachedLoops() (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(sysBlock, "loop*", "loop", "backing_file"))
	if err != nil {
		return nil, err
	}
	loops := make(map[string]string, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // detached while we listed
		}
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", f, err)
		}
		loops["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSuffix(string(b), "\n")
	}
	return loops, nil
}

// loopsOf returns the loop devices attached to backing. Reading sysfs
// instead of a record is what lets a restarted plugin find its devices,
// and what keeps one file from being attached twice (two loop devices
// mounting one filesystem would corrupt it).
func loopsOf(backing string) ([]string, error) {
	return loopsWhere(func(file string) bool { return file == backing })
}

func loopsWhere(match func(backing string) bool) ([]string, error) {
	loops, err := attachedLoops()
	if err != nil {
		return nil, err
	}
	var devs []string
	for dev, file := range loops {
		if match(file) {
			devs = append(devs, dev)
		}
	}
	slices.Sort(devs)
	return devs, nil
}

// attachLoop returns a loop device over backing, open: an existing one if
// the file is attached already, else a free one configured with
// LOOP_CONFIGURE. autoclear makes the kernel detach the device when its
// last user (the filesystem's mount) goes; the caller closes the file once
// that user holds the device. A block volume has no such user, so it is
// attached without autoclear and detached by NodeUnstageVolume.
func attachLoop(backing string, autoclear bool) (*os.File, error) {
	devs, err := loopsOf(backing)
	if err != nil {
		return nil, err
	}
	if len(devs) > 0 {
		return reuseLoop(devs[0], autoclear)
	}
	file, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open backing file %q: %w", backing, err)
	}
	defer file.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop control: %w", err)
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(file.Fd())}
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], backing)
	if autoclear {
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	}
	// Another process may take the free device between the two ioctls:
	// LOOP_CONFIGURE then fails with EBUSY and we ask again.
	for range 8 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open loop device %d: %w", n, err)
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attach %q to %s: %w", backing, dev.Name(), err)
		}
	}
	return nil, fmt.Errorf("attach %q: every free loop device was taken first", backing)
}

// reuseLoop opens an attached device and sets its autoclear flag as the
// volume's kind wants: a device lazily detached while still in use (a
// launcher's bind of the filesystem) has autoclear set, and a block volume
// staged on it again must not lose it when that user goes.
func reuseLoop(path string, autoclear bool) (*os.File, error) {
	dev, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop device %s: %w", path, err)
	}
	info, err := unix.IoctlLoopGetStatus64(int(dev.Fd()))
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("loop status of %s: %w", path, err)
	}
	if (info.Flags&unix.LO_FLAGS_AUTOCLEAR != 0) != autoclear {
		info.Flags ^= unix.LO_FLAGS_AUTOCLEAR
		if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), info); err != nil {
			dev.Close()
			return nil, fmt.Errorf("set autoclear=%t on %s: %w", autoclear, path, err)
		}
	}
	return dev, nil
}

// detachLoops detaches every loop device over backing. A device still in
// use (a filesystem mounted from it elsewhere) is detached by the kernel
// when its last user goes.
func detachLoops(backing string) error {
	devs, err := loopsOf(backing)
	if err != nil {
		return err
	}
	return detach(devs)
}

func detach(devs []string) error {
	for _, path := range devs {
		dev, err := os.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open loop device %s: %w", path, err)
		}
		err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		dev.Close()
		if err != nil && !errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("detach %s: %w", path, err)
		}
	}
	return nil
}

// DetachUnder detaches every loop device whose backing file lies under
// dir: a node's teardown, for the volumes still staged when it stopped.
// Loop devices over those devices go first: for a block volume the
// kubelet attaches one over the published device node as its device lock
// (removed only when it unmaps the volume), and while it holds the
// plugin's device open that one would only be marked autoclear and
// outlive the teardown. A device still in use otherwise goes when its
// last user does.
func DetachUnder(dir string) error {
	prefix := filepath.Clean(dir) + "/"
	devs, err := loopsWhere(func(file string) bool { return strings.HasPrefix(file, prefix) })
	if err == nil {
		var locks []string
		if locks, err = loopsOver(devs); err == nil {
			err = detach(append(locks, devs...))
		}
	}
	if err != nil {
		return fmt.Errorf("detach the loop devices under %q: %w", dir, err)
	}
	return nil
}

// loopsOver lists the attached loop devices whose backing file is one of
// devs' device nodes, matched by device and inode (the path sysfs shows
// for them is wherever their user opened the node).
func loopsOver(devs []string) ([]string, error) {
	var nodes []unix.Stat_t
	for _, dev := range devs {
		var st unix.Stat_t
		if err := unix.Stat(dev, &st); err == nil {
			nodes = append(nodes, st)
		}
	}
	loops, err := attachedLoops()
	if err != nil || len(nodes) == 0 {
		return nil, err
	}
	var over []string
	for dev := range loops {
		if backs(dev, nodes) {
			over = append(over, dev)
		}
	}
	slices.Sort(over)
	return over, nil
}

// backs says whether the loop device dev is backed by one of nodes.
func backs(dev string, nodes []unix.Stat_t) bool {
	f, err := os.Open(dev)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	return err == nil && slices.ContainsFunc(nodes, func(st unix.Stat_t) bool {
		return info.Device == st.Dev && info.Inode == st.Ino
	})
}

// refreshCapacity has every loop device over backing pick up the file's
// size (LOOP_SET_CAPACITY) and returns the first one's path.
func refreshCapacity(backing string) (string, error) {
	devs, err := loopsOf(backing)
	if err != nil {
		return "", err
	}
	if len(devs) == 0 {
		return "", fmt.Errorf("%w over %q", errNoLoop, backing)
	}
	for _, path := range devs {
		dev, err := os.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			return "", fmt.Errorf("open loop device %s: %w", path, err)
		}
		err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_CAPACITY, 0)
		dev.Close()
		if err != nil {
			return "", fmt.Errorf("refresh the capacity of %s: %w", path, err)
		}
	}
	return devs[0], nil
}

func growBackingFile(backing string, size int64) error {
	st, err := os.Stat(backing)
	if err != nil {
		return err
	}
	if st.Size() > size {
		return fmt.Errorf("grow %q to %d bytes: it holds %d already; volumes never shrink", backing, size, st.Size())
	}
	if err := os.Truncate(backing, size); err != nil {
		return err
	}
	if _, err := refreshCapacity(backing); err != nil && !errors.Is(err, errNoLoop) {
		return err
	}
	return nil
}
