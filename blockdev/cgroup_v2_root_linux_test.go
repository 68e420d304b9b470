// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const v2Hierarchy = "/sys/fs/cgroup/unified"

// attachRuntimeProgram attaches, as runc or crun would, a device program
// allowing c 1:3 and c 1:5 and denying everything else.
func attachRuntimeProgram(t *testing.T, cgroup string, flags uint32) {
	t.Helper()
	attachDeviceProgram(t, cgroup, runtimeDeviceProgram(Device{1, 3}, Device{1, 5}), flags)
}

// attachDeviceProgram loads insns as a device program and attaches it to
// cgroup with flags (BPF_PROG_ATTACH, no link).
func attachDeviceProgram(t *testing.T, cgroup string, insns asm.Instructions, flags uint32) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "runtime_devs",
		Type:         ebpf.CGroupDevice,
		Instructions: insns,
		License:      "Apache-2.0",
	})
	if err != nil {
		t.Fatalf("load device program: %v", err)
	}
	defer prog.Close()
	fd, err := unix.Open(cgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = link.RawAttachProgram(link.RawAttachProgramOptions{Target: fd, Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: flags})
	if err != nil {
		t.Fatalf("attach device program to %q: %v", cgroup, err)
	}
}

// allowAllProgram and denyAllProgram return 1 and 0 for every request.
var (
	allowAllProgram = asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}
	denyAllProgram  = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
)

type progState struct {
	ids    []uint32
	flags  []uint32
	devs   [][]Device
	bodies []asm.Instructions
}

func readPrograms(t *testing.T, cgroup string) progState {
	t.Helper()
	progs, err := AttachedDevicePrograms(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	var s progState
	for _, p := range progs {
		devs, body, err := UnwrapDeviceProgram(p.Instructions)
		if err != nil {
			t.Fatal(err)
		}
		s.ids = append(s.ids, p.ID)
		s.flags = append(s.flags, p.AttachFlags)
		s.devs = append(s.devs, devs)
		s.bodies = append(s.bodies, body)
	}
	return s
}

// checkPrograms checks that every program in orig is still attached with its
// original body and flags, now carrying exactly devs in hpmount's prefix.
func checkPrograms(t *testing.T, step string, orig map[string]progState, devs []Device) map[string]progState {
	t.Helper()
	now := map[string]progState{}
	for dir, o := range orig {
		s := readPrograms(t, dir)
		now[dir] = s
		if len(s.ids) != len(o.ids) || !slices.Equal(s.flags, o.flags) {
			t.Fatalf("%s: cgroup %q has programs %v flags %v, want %d programs with flags %v", step, dir, s.ids, s.flags, len(o.ids), o.flags)
		}
		for i := range s.ids {
			if !slices.Equal(s.devs[i], devs) {
				t.Fatalf("%s: cgroup %q program %d allows %v, want %v", step, dir, s.ids[i], s.devs[i], devs)
			}
			if !sameInstructions(s.bodies[i], o.bodies[i]) {
				t.Fatalf("%s: cgroup %q program %d body changed:\n%v\nwant\n%v", step, dir, s.ids[i], s.bodies[i], o.bodies[i])
			}
		}
	}
	return now
}

func TestV2AllowDenyRealCgroup(t *testing.T) {
	us := strings.ReplaceAll(testUID, "-", "_")
	podRel := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice"
	ctrRel := podRel + "/cri-containerd-" + testCtrID + ".scope"
	const none = ^uint32(0)
	tests := []struct {
		name               string
		podFlags, ctrFlags uint32
	}{
		{"runtime program with ALLOW_MULTI on the container", none, unix.BPF_F_ALLOW_MULTI},
		{"ALLOW_MULTI programs on pod and container, the pod's allowing all", unix.BPF_F_ALLOW_MULTI, unix.BPF_F_ALLOW_MULTI},
		{"single program attached without flags", none, 0},
		{"single program attached with ALLOW_OVERRIDE", none, unix.BPF_F_ALLOW_OVERRIDE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs := newTestDevices(t)
			base := newCgroupTree(t, v2Hierarchy, ctrRel)
			pod, ctr := filepath.Join(base, podRel), filepath.Join(base, ctrRel)
			r, err := NewDeviceRules(CgroupV2, base)
			if err != nil {
				t.Fatal(err)
			}
			// The pod cgroup's program runs for every container of the
			// pod: it is never rewritten.
			if tt.podFlags != none {
				attachDeviceProgram(t, pod, allowAllProgram, tt.podFlags)
			}
			podIDs := programIDs(t, pod)
			defer func() {
				if now := readPrograms(t, pod); !slices.Equal(now.ids, podIDs) || slices.ContainsFunc(now.devs, func(d []Device) bool { return len(d) > 0 }) {
					t.Errorf("pod cgroup programs %v (prefix devices %v), want %v untouched", now.ids, now.devs, podIDs)
				}
			}()
			attachRuntimeProgram(t, ctr, tt.ctrFlags)
			orig := map[string]progState{ctr: readPrograms(t, ctr)}
			checkAllowed(t, r, testCtr, devs.loop, false)
			devs.check(t, "before allow", ctr, wantOpen{loop: false, null: true, urandom: false})

			if err := r.Allow(testCtr, devs.loop); err != nil {
				t.Fatal(err)
			}
			checkAllowed(t, r, testCtr, devs.loop, true)
			devs.check(t, "after allow", ctr, wantOpen{loop: true, null: true, urandom: false})
			allowed := checkPrograms(t, "after allow", orig, []Device{devs.loop})

			if err := r.Allow(testCtr, devs.loop); err != nil {
				t.Fatal(err)
			}
			again := checkPrograms(t, "after allowing twice", orig, []Device{devs.loop})
			for dir := range allowed {
				if !slices.Equal(again[dir].ids, allowed[dir].ids) {
					t.Fatalf("allowing twice replaced programs on %q: %v -> %v", dir, allowed[dir].ids, again[dir].ids)
				}
			}

			other := Device{Major: devs.loop.Major, Minor: devs.loop.Minor + 1000}
			if err := r.Allow(testCtr, other); err != nil {
				t.Fatal(err)
			}
			checkPrograms(t, "after allowing a second device", orig, []Device{devs.loop, other})
			if err := r.Deny(testUID, other); err != nil {
				t.Fatal(err)
			}
			checkPrograms(t, "after denying the second device", orig, []Device{devs.loop})
			devs.check(t, "after denying the second device", ctr, wantOpen{loop: true, null: true, urandom: false})

			for i := 0; i < 2; i++ {
				if err := r.Deny(testUID, devs.loop); err != nil {
					t.Fatal(err)
				}
			}
			checkAllowed(t, r, testCtr, devs.loop, false)
			devs.check(t, "after deny", ctr, wantOpen{loop: false, null: true, urandom: false})
			checkPrograms(t, "after deny", orig, nil)
		})
	}
}

func TestV2NoProgramIsNoop(t *testing.T) {
	devs := newTestDevices(t)
	ctrRel := "kubepods/pod" + testUID + "/" + testCtrID
	base := newCgroupTree(t, v2Hierarchy, ctrRel)
	ctr := filepath.Join(base, ctrRel)
	r := NewV2(base)
	checkAllowed(t, r, testCtr, devs.loop, true)
	if err := r.Allow(testCtr, devs.loop); err != nil {
		t.Fatal(err)
	}
	if progs, err := AttachedDevicePrograms(ctr); err != nil || len(progs) != 0 {
		t.Fatalf("Allow without a device program attached %v (%v)", progs, err)
	}
	devs.check(t, "no device program", ctr, wantOpen{loop: true, null: true, urandom: true})
	if err := r.Deny(testUID, devs.loop); err != nil {
		t.Fatal(err)
	}
}

func TestV2RefusesProgramWithCall(t *testing.T) {
	ctrRel := "kubepods/pod" + testUID + "/" + testCtrID
	base := newCgroupTree(t, v2Hierarchy, ctrRel)
	ctr := filepath.Join(base, ctrRel)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "calls_helper",
		Type: ebpf.CGroupDevice,
		Instructions: asm.Instructions{
			asm.FnGetCurrentUidGid.Call(),
			asm.Mov.Imm(asm.R0, 1),
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	fd, err := unix.Open(ctr, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: fd, Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI}); err != nil {
		t.Fatal(err)
	}
	err = NewV2(base).Allow(testCtr, Device{7, 0})
	if !errors.Is(err, ErrNotReloadable) || !strings.Contains(err.Error(), ctr) {
		t.Fatalf("Allow over a program with a helper call: %v, want ErrNotReloadable naming %q", err, ctr)
	}
}
