// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// checkInherited runs, for dev, every device program the cgroup dir
// inherits (its effective programs not attached to dir itself: those of
// the pod cgroup and above that the kernel runs for dir's processes too),
// and names the ancestor of the first one that refuses it. A program that
// cannot be read faithfully or run is no proof either way: an error.
func checkInherited(dir string, dev Device) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup %q: %w", dir, err)
	}
	defer unix.Close(fd)
	_, own, err := queryDevicePrograms(fd, 0)
	if err != nil {
		return fmt.Errorf("query device programs of cgroup %q: %w", dir, err)
	}
	_, effective, err := queryDevicePrograms(fd, unix.BPF_F_QUERY_EFFECTIVE)
	if err != nil {
		return fmt.Errorf("query effective device programs of cgroup %q: %w", dir, err)
	}
	for _, id := range effective {
		if slices.Contains(own, id) {
			continue
		}
		insns, err := inheritedInstructions(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // detached meanwhile: it no longer runs
		}
		var denied string
		if err == nil {
			denied, err = deniedAccess(insns, dev)
		}
		if err != nil {
			return fmt.Errorf("device program %d on cgroup %s above %q: cannot tell whether it allows %s: %w",
				id, ancestorOf(dir, id), dir, dev, err)
		}
		if denied != "" {
			return fmt.Errorf("device program %d on cgroup %s above %q refuses %s (access %q): %w",
				id, ancestorOf(dir, id), dir, dev, denied, ErrAncestorDenies)
		}
	}
	return nil
}

func inheritedInstructions(id ebpf.ProgramID) (asm.Instructions, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return programInstructions(p)
}

// ancestorOf names, quoted, the ancestor of dir that program id is
// attached to, walking up the cgroup2 hierarchy.
func ancestorOf(dir string, id ebpf.ProgramID) string {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			break
		}
		if attachedTo(d, id) {
			return fmt.Sprintf("%q", d)
		}
		if d == "/" {
			break
		}
	}
	return fmt.Sprintf("above %q (moved meanwhile)", dir)
}

func attachedTo(dir string, id ebpf.ProgramID) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	_, ids, err := queryDevicePrograms(fd, 0)
	return err == nil && slices.Contains(ids, id)
}
