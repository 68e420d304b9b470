// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const (
	v2ProgramName    = "hpmount_devcg"
	v2ProgramLicense = "Apache-2.0"
	// maxCgroupPrograms is BPF_CGROUP_MAX_PROGS: the kernel never attaches
	// more programs of one type to one cgroup.
	maxCgroupPrograms = 64
	// replaceAttempts bounds the retries when another writer replaced a
	// program between our query and our attach.
	replaceAttempts = 5
)

// Allow adds dev to hpmount's prefix of every device program attached to
// the container's cgroup and the cgroups below it. Programs on the pod
// cgroup and above run for every container of the pod (and, higher up, for
// other pods): they are never rewritten (see Allowed). When no cgroup of the
// container has a device program, nothing there restricts devices and
// Allow changes nothing.
func (v *V2) Allow(c Container, dev Device) error {
	if err := dev.Validate(); err != nil {
		return err
	}
	ctr, err := v.pods.Container(v.root, c.PodUID, c.ID)
	if err != nil {
		return err
	}
	return v.update(ctr.TopDown(), ctr.Dir, dev, true)
}

// Deny removes dev from hpmount's prefixes in every cgroup of the pod,
// children first: the compute container's, any other's, and the pod
// cgroup's, where older hpmount versions granted it. The device then falls
// through to the runtime's original program, which is what it was before
// Allow. A program left with no rules is replaced by its original body
// alone.
func (v *V2) Deny(podUID string, dev Device) error {
	if err := dev.Validate(); err != nil {
		return err
	}
	cgs, err := v.pods.Find(v.root, podUID)
	if err != nil {
		return err
	}
	return v.update(cgs.BottomUp(), cgs.Pod, dev, false)
}

// Allowed reports whether every device program in the container's cgroup
// subtree carries hpmount's rule for dev (true also when there is no
// program at all), and whether every program inherited from above (the
// container cgroup's effective programs, BPF_F_QUERY_EFFECTIVE) lets it
// through: the kernel runs them all and an access must pass each. A device
// that the runtime's own program happens to allow, without our rule,
// reports false; one an ancestor's program refuses wraps ErrAncestorDenies
// naming that cgroup, as hpmount never rewrites an ancestor's program.
func (v *V2) Allowed(c Container, dev Device) (bool, error) {
	if err := dev.Validate(); err != nil {
		return false, err
	}
	ctr, err := v.pods.Container(v.root, c.PodUID, c.ID)
	if err != nil {
		return false, err
	}
	for _, dir := range ctr.TopDown() {
		progs, err := AttachedDevicePrograms(dir)
		if err != nil {
			if dir != ctr.Dir && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return false, err
		}
		for _, p := range progs {
			devs, _, err := UnwrapDeviceProgram(p.Instructions)
			if err != nil {
				return false, fmt.Errorf("device program %d on cgroup %q: %w", p.ID, dir, err)
			}
			if !containsDevice(devs, dev) {
				return false, nil
			}
		}
	}
	if err := checkInherited(ctr.Dir, dev); err != nil {
		return false, err
	}
	return true, nil
}

func containsDevice(devs []Device, d Device) bool {
	for _, x := range devs {
		if x == d {
			return true
		}
	}
	return false
}

// update rewraps the device programs of dirs, in that order. A cgroup other
// than top that went away meanwhile is passed over.
func (v *V2) update(dirs []string, top string, dev Device, allow bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	programs := 0
	for _, dir := range dirs {
		n, err := updateCgroupPrograms(dir, dev, allow)
		if err != nil {
			if dir != top && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		programs += n
	}
	if programs == 0 && allow {
		// cgroup v2 has no device controller of its own: without a
		// BPF_PROG_TYPE_CGROUP_DEVICE program every device is allowed.
		slog.Debug("no device program in container cgroup subtree, device already allowed",
			"cgroup", top, "device", dev.String())
	}
	return nil
}

// updateCgroupPrograms rewraps every device program attached to the cgroup
// dir and returns how many there were.
func updateCgroupPrograms(dir string, dev Device, allow bool) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open cgroup %q: %w", dir, err)
	}
	defer unix.Close(fd)
	for attempt := 0; attempt < replaceAttempts; attempt++ {
		flags, ids, err := queryDevicePrograms(fd, 0)
		if err != nil {
			return 0, fmt.Errorf("query device programs of cgroup %q: %w", dir, err)
		}
		raced := false
		for _, id := range ids {
			err := rewrapProgram(fd, flags, id, dev, allow)
			if errors.Is(err, errReplaceRaced) {
				raced = true
				break
			}
			if err != nil {
				return 0, fmt.Errorf("cgroup %q: %w", dir, err)
			}
		}
		if !raced {
			return len(ids), nil
		}
	}
	return 0, fmt.Errorf("cgroup %q: device programs kept changing during %d attempts", dir, replaceAttempts)
}

var errReplaceRaced = errors.New("attached program changed meanwhile")

func rewrapProgram(cgfd int, flags uint32, id ebpf.ProgramID, dev Device, allow bool) error {
	old, err := ebpf.NewProgramFromID(id)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errReplaceRaced
		}
		return fmt.Errorf("open device program %d: %w", id, err)
	}
	defer old.Close()
	insns, err := programInstructions(old)
	if err != nil {
		return fmt.Errorf("device program %d: %w", id, err)
	}
	devs, body, err := UnwrapDeviceProgram(insns)
	if err != nil {
		return fmt.Errorf("device program %d: %w", id, err)
	}
	devs, changed := withDevice(devs, dev, allow)
	if !changed {
		return nil
	}
	wrapped, err := WrapDeviceProgram(devs, body)
	if err != nil {
		return fmt.Errorf("device program %d: %w", id, err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         v2ProgramName,
		Type:         ebpf.CGroupDevice,
		Instructions: wrapped,
		License:      v2ProgramLicense,
	})
	if err != nil {
		return fmt.Errorf("load device program replacing %d: %w", id, err)
	}
	defer prog.Close()
	opts := link.RawAttachProgramOptions{Target: cgfd, Program: prog, Attach: ebpf.AttachCGroupDevice}
	if flags&unix.BPF_F_ALLOW_MULTI != 0 {
		// Atomic swap in place; fails if id is no longer attached.
		opts.Flags = unix.BPF_F_ALLOW_MULTI
		opts.Anchor = link.ReplaceProgram(old)
	} else {
		// At most one program, attached with flags 0 or ALLOW_OVERRIDE:
		// attaching with the same flags replaces it. The kernel has no
		// compare-and-swap here; re-check right before.
		_, ids, err := queryDevicePrograms(cgfd, 0)
		if err != nil {
			return fmt.Errorf("query device programs: %w", err)
		}
		if len(ids) != 1 || ids[0] != id {
			return errReplaceRaced
		}
		opts.Flags = flags
	}
	if err := link.RawAttachProgram(opts); err != nil {
		if errors.Is(err, unix.ENOENT) && stillAttached(cgfd, id) {
			// The kernel found no program to replace, yet id is attached:
			// it is a bpf_link's, which BPF_F_REPLACE never matches.
			return fmt.Errorf("replace device program %d: %w", id, ErrLinkAttached)
		}
		if errors.Is(err, unix.ENOENT) {
			return errReplaceRaced
		}
		return fmt.Errorf("replace device program %d (attach flags %#x): %w", id, flags, err)
	}
	return nil
}

// stillAttached reports whether program id is attached directly to the
// cgroup cgfd.
func stillAttached(cgfd int, id ebpf.ProgramID) bool {
	_, ids, err := queryDevicePrograms(cgfd, 0)
	return err == nil && slices.Contains(ids, id)
}

func programInstructions(p *ebpf.Program) (asm.Instructions, error) {
	info, err := p.Info()
	if err != nil {
		return nil, fmt.Errorf("program info: %w", err)
	}
	if info.Type != ebpf.CGroupDevice {
		return nil, fmt.Errorf("program type %v, want %v", info.Type, ebpf.CGroupDevice)
	}
	insns, err := info.Instructions()
	if err != nil {
		return nil, fmt.Errorf("read translated instructions: %w", err)
	}
	if err := CheckNotBlinded(insns); err != nil {
		return nil, err
	}
	return insns, nil
}

// AttachedDevicePrograms returns the BPF_PROG_TYPE_CGROUP_DEVICE programs
// attached directly to the cgroup dir (not those inherited from ancestors),
// with their translated instructions.
func AttachedDevicePrograms(dir string) ([]DeviceProgram, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %q: %w", dir, err)
	}
	defer unix.Close(fd)
	flags, ids, err := queryDevicePrograms(fd, 0)
	if err != nil {
		return nil, fmt.Errorf("query device programs of cgroup %q: %w", dir, err)
	}
	out := make([]DeviceProgram, 0, len(ids))
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // detached meanwhile
			}
			return nil, fmt.Errorf("cgroup %q: open device program %d: %w", dir, id, err)
		}
		insns, err := programInstructions(p)
		p.Close()
		if err != nil {
			return nil, fmt.Errorf("cgroup %q: device program %d: %w", dir, id, err)
		}
		out = append(out, DeviceProgram{ID: uint32(id), AttachFlags: flags, Instructions: insns})
	}
	return out, nil
}

// progQueryAttr is the BPF_PROG_QUERY part of union bpf_attr. cilium/ebpf's
// link.QueryPrograms does not return attach_flags, which decide how a
// program may be replaced, so the query is made here in one syscall.
type progQueryAttr struct {
	targetFd    uint32
	attachType  uint32
	queryFlags  uint32
	attachFlags uint32
	progIDs     uint64
	progCount   uint32
	_           uint32
}

// queryDevicePrograms returns the cgroup's attach flags for device programs
// and the IDs of the programs attached directly to it, or with
// BPF_F_QUERY_EFFECTIVE of every program that runs for it (its own and
// those inherited from ancestors).
func queryDevicePrograms(cgfd int, queryFlags uint32) (uint32, []ebpf.ProgramID, error) {
	ids := make([]uint32, maxCgroupPrograms)
	for {
		attr := progQueryAttr{
			targetFd:   uint32(cgfd),
			attachType: uint32(ebpf.AttachCGroupDevice),
			queryFlags: queryFlags,
			progIDs:    uint64(uintptr(unsafe.Pointer(&ids[0]))),
			progCount:  uint32(len(ids)),
		}
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_QUERY, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		runtime.KeepAlive(ids)
		if errno == unix.ENOSPC && int(attr.progCount) > len(ids) {
			// More effective programs than room: the kernel said how many.
			ids = make([]uint32, attr.progCount)
			continue
		}
		if errno != 0 {
			return 0, nil, fmt.Errorf("BPF_PROG_QUERY: %w", errno)
		}
		n := min(int(attr.progCount), len(ids))
		out := make([]ebpf.ProgramID, n)
		for i := range out {
			out[i] = ebpf.ProgramID(ids[i])
		}
		return attr.attachFlags, out, nil
	}
}
