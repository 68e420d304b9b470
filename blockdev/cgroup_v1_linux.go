// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// v1Rule is the line written to devices.allow / devices.deny.
func v1Rule(d Device) string { return fmt.Sprintf("b %d:%d rwm", d.Major, d.Minor) }

// Allow writes "b MAJ:MIN rwm" to devices.allow of the container's cgroup
// and then of every descendant: a v1 device cgroup can never be wider than
// its parent, so the parent must allow the device first. The pod cgroup
// above (the kubelet leaves it allowing everything) is never written: a
// parent that does not allow the device makes the kernel refuse the write
// (EPERM), which wraps ErrAncestorDenies.
func (v *V1) Allow(c Container, dev Device) error {
	if err := dev.Validate(); err != nil {
		return err
	}
	ctr, err := v.pods.Container(v.root, c.PodUID, c.ID)
	if err != nil {
		return err
	}
	for _, dir := range ctr.TopDown() {
		err := writeCgroupFile(dir, "devices.allow", v1Rule(dev))
		switch {
		case err == nil:
		case dir != ctr.Dir && errors.Is(err, os.ErrNotExist):
			// a cgroup below the container removed meanwhile
		case dir == ctr.Dir && errors.Is(err, unix.EPERM):
			return fmt.Errorf("allow %s in device cgroup %q: the kernel refused it, so its parent %q does not allow it: %w",
				dev, dir, filepath.Dir(dir), ErrAncestorDenies)
		default:
			return fmt.Errorf("allow %s in device cgroup %q: %w", dev, dir, err)
		}
	}
	return nil
}

// Deny takes the device back in every cgroup of the pod, children first:
// the current compute container, any other (older hpmount versions granted
// the whole pod). Cgroups whose default is
// "allow all" (the kubelet's pod-level cgroup) are left alone: Allow added no
// exception there, and a deny entry would be a restriction hpmount never made.
func (v *V1) Deny(podUID string, dev Device) error {
	if err := dev.Validate(); err != nil {
		return err
	}
	cgs, err := v.pods.Find(v.root, podUID)
	if err != nil {
		return err
	}
	for _, dir := range cgs.BottomUp() {
		list, err := readDevicesList(dir)
		if err != nil {
			if dir != cgs.Pod && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		if list.allowAll {
			continue
		}
		// Removing an exception that is not there succeeds in the kernel.
		if err := writeCgroupFile(dir, "devices.deny", v1Rule(dev)); err != nil {
			if dir != cgs.Pod && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("deny %s in device cgroup %q: %w", dev, dir, err)
		}
	}
	return nil
}

// Allowed reads devices.list of the container's cgroup and every
// descendant. A cgroup in "allow all" mode counts as allowing the device;
// the kernel does not list the deny exceptions of such a cgroup.
//
// Ancestors are not read: the v1 controller checks an access against the
// task's own cgroup alone (devcgroup_legacy_check_permission), and keeps
// every cgroup within its parent when either is written (parent_has_perm
// refuses a wider exception, propagate_exception narrows the children of
// a parent that is narrowed). A device an ancestor denies is therefore
// missing from the container's own list.
func (v *V1) Allowed(c Container, dev Device) (bool, error) {
	if err := dev.Validate(); err != nil {
		return false, err
	}
	ctr, err := v.pods.Container(v.root, c.PodUID, c.ID)
	if err != nil {
		return false, err
	}
	for _, dir := range ctr.TopDown() {
		list, err := readDevicesList(dir)
		if err != nil {
			if dir != ctr.Dir && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return false, err
		}
		if !list.allows(dev) {
			return false, nil
		}
	}
	return true, nil
}

// devicesList is a parsed cgroup v1 devices.list.
type devicesList struct {
	allowAll bool
	entries  []devicesEntry
}

type devicesEntry struct {
	typ          byte  // 'a', 'b' or 'c'
	major, minor int64 // -1 for '*'
	access       string
}

func (l devicesList) allows(d Device) bool {
	if l.allowAll {
		return true
	}
	for _, e := range l.entries {
		if e.typ != 'a' && e.typ != 'b' {
			continue
		}
		if (e.major == -1 || e.major == int64(d.Major)) && (e.minor == -1 || e.minor == int64(d.Minor)) &&
			strings.Contains(e.access, "r") && strings.Contains(e.access, "w") && strings.Contains(e.access, "m") {
			return true
		}
	}
	return false
}

func readDevicesList(dir string) (devicesList, error) {
	path := filepath.Join(dir, "devices.list")
	data, err := readCgroupFile(path)
	if err != nil {
		return devicesList{}, fmt.Errorf("read device cgroup list %q: %w", path, err)
	}
	l, err := parseDevicesList(string(data))
	if err != nil {
		return devicesList{}, fmt.Errorf("parse %q: %w", path, err)
	}
	return l, nil
}

func parseDevicesList(s string) (devicesList, error) {
	var l devicesList
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || len(f[0]) != 1 || strings.Count(f[1], ":") != 1 {
			return devicesList{}, fmt.Errorf("line %d %q: want \"TYPE MAJ:MIN ACCESS\"", n+1, line)
		}
		majS, minS, _ := strings.Cut(f[1], ":")
		maj, err1 := parseDevicePart(majS)
		min, err2 := parseDevicePart(minS)
		if err := errors.Join(err1, err2); err != nil {
			return devicesList{}, fmt.Errorf("line %d %q: %w", n+1, line, err)
		}
		e := devicesEntry{typ: f[0][0], major: maj, minor: min, access: f[2]}
		switch e.typ {
		case 'a', 'b', 'c':
		default:
			return devicesList{}, fmt.Errorf("line %d %q: unknown device type %q", n+1, line, f[0])
		}
		if e.typ == 'a' && maj == -1 && min == -1 && e.access == "rwm" {
			l.allowAll = true
		}
		l.entries = append(l.entries, e)
	}
	return l, nil
}

func parseDevicePart(s string) (int64, error) {
	if s == "*" {
		return -1, nil
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("device number %q: %w", s, err)
	}
	return int64(v), nil
}

// writeCgroupFile writes line to the control file name in dir with one
// write(2), as the kernel parses each write as one request. The file is
// opened without following symlinks.
func writeCgroupFile(dir, name, line string) error {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if _, err := f.Write([]byte(line)); err != nil {
		return fmt.Errorf("write %q to %q: %w", line, path, err)
	}
	return nil
}

func readCgroupFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
