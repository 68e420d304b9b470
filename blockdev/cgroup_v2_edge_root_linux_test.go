// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const jitHarden = "/proc/sys/net/core/bpf_jit_harden"

// setJITHarden sets net.core.bpf_jit_harden for the rest of the test and
// restores it after. The knob is global: callers hold the heavy lock.
func setJITHarden(t *testing.T, v string) {
	t.Helper()
	old, err := os.ReadFile(jitHarden)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(jitHarden, old, 0); err != nil {
			t.Errorf("restore %s: %v", jitHarden, err)
		}
	})
	if err := os.WriteFile(jitHarden, []byte(v), 0); err != nil {
		t.Fatal(err)
	}
}

// TestV2JITHardenBlinded: with net.core.bpf_jit_harden=2 the kernel hands
// out a device program's translated instructions with every constant
// blinded through R11. Such a read shows no hpmount prefix, so before
// ErrBlinded Deny found nothing to remove and reported success while the
// device stayed allowed, and Allow failed in the verifier ("R11 is
// invalid"). Now every read of a blinded program fails with ErrBlinded,
// and nothing is reloaded.
func TestV2JITHardenBlinded(t *testing.T) {
	devs := newTestDevices(t)
	ctrRel := "kubepods/pod" + testUID + "/" + testCtrID

	t.Run("prefix loaded under hardening", func(t *testing.T) {
		base := newCgroupTree(t, v2Hierarchy, ctrRel)
		ctr := filepath.Join(base, ctrRel)
		attachRuntimeProgram(t, ctr, unix.BPF_F_ALLOW_MULTI) // before hardening: reads back faithfully
		setJITHarden(t, "2")
		r := NewV2(base)
		if err := r.Allow(testCtr, devs.loop); err != nil {
			t.Fatalf("allow over a program loaded before hardening: %v", err)
		}
		devs.check(t, "after allow", ctr, wantOpen{loop: true, null: true, urandom: false})
		before := programIDs(t, ctr)
		if _, err := r.Allowed(testCtr, devs.loop); !errors.Is(err, ErrBlinded) {
			t.Errorf("Allowed over a blinded program: %v, want ErrBlinded", err)
		}
		if err := r.Deny(testUID, devs.loop); !errors.Is(err, ErrBlinded) || !strings.Contains(err.Error(), ctr) {
			t.Errorf("Deny over a blinded program: %v, want ErrBlinded naming %q (not a silent success)", err, ctr)
		}
		if after := programIDs(t, ctr); !slices.Equal(after, before) {
			t.Errorf("programs %v replaced by %v", before, after)
		}
	})
	t.Run("runtime program loaded under hardening", func(t *testing.T) {
		base := newCgroupTree(t, v2Hierarchy, ctrRel)
		ctr := filepath.Join(base, ctrRel)
		setJITHarden(t, "2")
		attachRuntimeProgram(t, ctr, unix.BPF_F_ALLOW_MULTI)
		before := programIDs(t, ctr)
		if err := NewV2(base).Allow(testCtr, devs.loop); !errors.Is(err, ErrBlinded) {
			t.Fatalf("Allow over a blinded runtime program: %v, want ErrBlinded", err)
		}
		if after := programIDs(t, ctr); !slices.Equal(after, before) {
			t.Errorf("programs %v replaced by %v", before, after)
		}
		devs.check(t, "after the refused allow", ctr, wantOpen{loop: false, null: true, urandom: false})
	})
}

// programIDs lists the IDs of the device programs attached to cgroup,
// without reading them (a blinded one cannot be read).
func programIDs(t *testing.T, cgroup string) []uint32 {
	t.Helper()
	fd, err := unix.Open(cgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_, ids, err := queryDevicePrograms(fd, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// TestV2LinkAttachedProgram: a device program attached through a bpf_link
// (BPF_LINK_CREATE) cannot be swapped with BPF_F_REPLACE. Allow used to
// retry five times and report "device programs kept changing"; it now
// fails at once with ErrLinkAttached naming the cgroup, and the link's
// program stays attached and unchanged.
func TestV2LinkAttachedProgram(t *testing.T) {
	devs := newTestDevices(t)
	ctrRel := "kubepods/pod" + testUID + "/" + testCtrID
	base := newCgroupTree(t, v2Hierarchy, ctrRel)
	ctr := filepath.Join(base, ctrRel)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "runtime_devs", Type: ebpf.CGroupDevice,
		Instructions: runtimeDeviceProgram(Device{1, 3}), License: "Apache-2.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	l, err := link.AttachCgroup(link.CgroupOptions{Path: ctr, Attach: ebpf.AttachCGroupDevice, Program: prog})
	if err != nil {
		t.Fatalf("attach through a bpf_link: %v", err)
	}
	defer l.Close()
	before := programIDs(t, ctr)
	err = NewV2(base).Allow(testCtr, devs.loop)
	if !errors.Is(err, ErrLinkAttached) || !strings.Contains(err.Error(), ctr) {
		t.Fatalf("Allow over a link-attached program: %v, want ErrLinkAttached naming %q", err, ctr)
	}
	if after := programIDs(t, ctr); !slices.Equal(after, before) {
		t.Fatalf("programs %v, want %v", after, before)
	}
	devs.check(t, "after the refused allow", ctr, wantOpen{loop: false, null: true, urandom: false})
}

// TestV2AncestorProgramUntouched: a device program attached above the pod
// cgroup (here on kubepods, shared with every pod) is never rewritten:
// Allow changes only the pod subtree's programs, so it never widens what
// other pods may open. The ancestor's program still runs for the pod, and
// a device it denies stays denied: Allowed says so, naming the ancestor
// (it used to report the device allowed).
func TestV2AncestorProgramUntouched(t *testing.T) {
	devs := newTestDevices(t)
	ctrRel := "kubepods/pod" + testUID + "/" + testCtrID
	base := newCgroupTree(t, v2Hierarchy, ctrRel)
	ancestor, ctr := filepath.Join(base, "kubepods"), filepath.Join(base, ctrRel)
	attachRuntimeProgram(t, ancestor, unix.BPF_F_ALLOW_MULTI)
	attachRuntimeProgram(t, ctr, unix.BPF_F_ALLOW_MULTI)
	orig := readPrograms(t, ancestor)
	if err := NewV2(base).Allow(testCtr, devs.loop); err != nil {
		t.Fatal(err)
	}
	now := readPrograms(t, ancestor)
	if !slices.Equal(now.ids, orig.ids) || len(now.devs) != 1 || len(now.devs[0]) != 0 {
		t.Fatalf("ancestor programs %v (prefix devices %v), want %v untouched", now.ids, now.devs, orig.ids)
	}
	if ctrProgs := readPrograms(t, ctr); len(ctrProgs.devs) != 1 || !slices.Equal(ctrProgs.devs[0], []Device{devs.loop}) {
		t.Fatalf("container program allows %v, want %v", ctrProgs.devs, devs.loop)
	}
	devs.check(t, "ancestor denies", ctr, wantOpen{loop: false, null: true, urandom: false})
	ok, err := NewV2(base).Allowed(testCtr, devs.loop)
	if ok || !errors.Is(err, ErrAncestorDenies) || !strings.Contains(err.Error(), `"`+ancestor+`"`) {
		t.Fatalf("Allowed = %v, %v; want false with ErrAncestorDenies naming %q", ok, err, ancestor)
	}
}
