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

	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/podcgroup"
)

// The launcher's containers in the tests below: compute (QEMU's), a
// sibling (guest-console-log, a hotplug sidecar), and compute again after
// a restart, under a new ID.
const (
	computeID   = "c0ffee0000000000000000000000000000000000000000000000000000000001"
	siblingID   = "51b11a90000000000000000000000000000000000000000000000000000000002"
	restartedID = "c0ffee0000000000000000000000000000000000000000000000000000000003"
)

func container(id string) Container { return Container{PodUID: testUID, ID: "containerd://" + id} }

// v1RuntimeDefaults writes what runc leaves in a container's devices
// cgroup: everything denied, /dev/null allowed.
func v1RuntimeDefaults(t *testing.T, dir string) {
	t.Helper()
	for _, w := range []struct{ file, line string }{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"}} {
		if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.line), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestV1ComputeOnly: the rule goes to the compute container's cgroup, not
// to its sibling's; after compute restarts under a new ID (a new cgroup,
// runtime defaults again) the old ID is not found, the new one is not
// allowed until Allow is asked again, and the sibling never is.
func TestV1ComputeOnly(t *testing.T) {
	devs := newTestDevices(t)
	podRel := "kubepods/burstable/pod" + testUID
	base := newCgroupTree(t, v1Hierarchy, podRel+"/"+computeID, podRel+"/"+siblingID)
	pod := filepath.Join(base, podRel)
	compute, sibling := filepath.Join(pod, computeID), filepath.Join(pod, siblingID)
	v1RuntimeDefaults(t, compute)
	v1RuntimeDefaults(t, sibling)
	r := NewV1(base)

	if err := r.Allow(container(computeID), devs.loop); err != nil {
		t.Fatal(err)
	}
	checkAllowed(t, r, container(computeID), devs.loop, true)
	checkAllowed(t, r, container(siblingID), devs.loop, false)
	if got := readList(t, sibling); got != "c 1:3 rwm\n" {
		t.Fatalf("sibling devices.list = %q, want only c 1:3 rwm", got)
	}
	if !strings.Contains(readList(t, compute), v1Rule(devs.loop)) {
		t.Fatalf("compute devices.list lacks %q:\n%s", v1Rule(devs.loop), readList(t, compute))
	}
	devs.check(t, "compute", compute, wantOpen{loop: true, null: true, urandom: false})
	devs.check(t, "sibling", sibling, wantOpen{loop: false, null: true, urandom: false})

	// compute restarts: its cgroup is replaced by one named after the new ID.
	removeCgroup(t, compute)
	restarted := filepath.Join(pod, restartedID)
	if err := os.Mkdir(restarted, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(t, restarted) })
	v1RuntimeDefaults(t, restarted)
	if _, err := r.Allowed(container(computeID), devs.loop); !errors.Is(err, podcgroup.ErrContainerNotFound) {
		t.Fatalf("Allowed for the container that restarted away: %v, want ErrContainerNotFound", err)
	}
	if err := r.Allow(Container{PodUID: testUID}, devs.loop); !errors.Is(err, podcgroup.ErrNoContainerID) {
		t.Fatalf("Allow without a container ID: %v, want ErrNoContainerID", err)
	}
	checkAllowed(t, r, container(restartedID), devs.loop, false)
	if err := r.Allow(container(restartedID), devs.loop); err != nil {
		t.Fatal(err)
	}
	checkAllowed(t, r, container(restartedID), devs.loop, true)
	devs.check(t, "restarted compute", restarted, wantOpen{loop: true, null: true, urandom: false})
	checkAllowed(t, r, container(siblingID), devs.loop, false)

	if err := r.Deny(testUID, devs.loop); err != nil {
		t.Fatal(err)
	}
	checkAllowed(t, r, container(restartedID), devs.loop, false)
	if got := readList(t, pod); got != "a *:* rwm\n" {
		t.Fatalf("pod devices.list = %q: hpmount must not restrict the pod level", got)
	}
}

// TestV1AncestorDenies: a parent that denies the device narrows the
// container's own list (the kernel propagates it), so Allowed, reading the
// container alone, says no; Allow cannot widen the container past its
// parent and says which parent refused.
func TestV1AncestorDenies(t *testing.T) {
	devs := newTestDevices(t)
	podRel := "kubepods/pod" + testUID
	base := newCgroupTree(t, v1Hierarchy, podRel+"/"+computeID)
	pod := filepath.Join(base, podRel)
	compute := filepath.Join(pod, computeID)
	v1RuntimeDefaults(t, compute)
	r := NewV1(base)
	if err := r.Allow(container(computeID), devs.loop); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pod, "devices.deny"), []byte(v1Rule(devs.loop)), 0); err != nil {
		t.Fatal(err)
	}
	checkAllowed(t, r, container(computeID), devs.loop, false)
	err := r.Allow(container(computeID), devs.loop)
	if !errors.Is(err, ErrAncestorDenies) || !strings.Contains(err.Error(), pod) {
		t.Fatalf("Allow below a parent that denies: %v, want ErrAncestorDenies naming %q", err, pod)
	}
	devs.check(t, "parent denies", compute, wantOpen{loop: false, null: true, urandom: false})
}

// TestV2ComputeOnly: only the compute container's program carries the
// rule; the sibling's program is not rewritten. After a restart the new
// container's fresh runtime program lacks it until Allow runs again.
func TestV2ComputeOnly(t *testing.T) {
	devs := newTestDevices(t)
	us := strings.ReplaceAll(testUID, "-", "_")
	podRel := "kubepods.slice/kubepods-pod" + us + ".slice"
	scope := func(id string) string { return "cri-containerd-" + id + ".scope" }
	base := newCgroupTree(t, v2Hierarchy, podRel+"/"+scope(computeID), podRel+"/"+scope(siblingID))
	pod := filepath.Join(base, podRel)
	compute, sibling := filepath.Join(pod, scope(computeID)), filepath.Join(pod, scope(siblingID))
	attachRuntimeProgram(t, compute, unix.BPF_F_ALLOW_MULTI)
	attachRuntimeProgram(t, sibling, unix.BPF_F_ALLOW_MULTI)
	siblingIDs := programIDs(t, sibling)
	r := NewV2(base)

	if err := r.Allow(container(computeID), devs.loop); err != nil {
		t.Fatal(err)
	}
	checkAllowed(t, r, container(computeID), devs.loop, true)
	checkAllowed(t, r, container(siblingID), devs.loop, false)
	if p := readPrograms(t, compute); len(p.devs) != 1 || !slices.Equal(p.devs[0], []Device{devs.loop}) {
		t.Fatalf("compute programs allow %v, want [%v]", p.devs, devs.loop)
	}
	if p := readPrograms(t, sibling); !slices.Equal(p.ids, siblingIDs) || len(p.devs) != 1 || len(p.devs[0]) != 0 {
		t.Fatalf("sibling programs %v (prefix devices %v), want %v untouched", p.ids, p.devs, siblingIDs)
	}
	devs.check(t, "compute", compute, wantOpen{loop: true, null: true, urandom: false})
	devs.check(t, "sibling", sibling, wantOpen{loop: false, null: true, urandom: false})

	removeCgroup(t, compute)
	restarted := filepath.Join(pod, scope(restartedID))
	if err := os.Mkdir(restarted, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(t, restarted) })
	attachRuntimeProgram(t, restarted, unix.BPF_F_ALLOW_MULTI)
	if _, err := r.Allowed(container(computeID), devs.loop); !errors.Is(err, podcgroup.ErrContainerNotFound) {
		t.Fatalf("Allowed for the container that restarted away: %v, want ErrContainerNotFound", err)
	}
	checkAllowed(t, r, container(restartedID), devs.loop, false)
	if err := r.Allow(container(restartedID), devs.loop); err != nil {
		t.Fatal(err)
	}
	checkAllowed(t, r, container(restartedID), devs.loop, true)
	devs.check(t, "restarted compute", restarted, wantOpen{loop: true, null: true, urandom: false})
	devs.check(t, "sibling after the restart", sibling, wantOpen{loop: false, null: true, urandom: false})
}

// TestV2AncestorDenies: Allowed runs the programs the container inherits.
// A deny-all program on the pod cgroup (attached with ALLOW_MULTI, so it
// runs beside the container's) keeps the device denied however the
// container's program is rewritten: Allowed says so and names the pod
// cgroup. An allowing ancestor, or one the container's program overrides,
// is no obstacle.
func TestV2AncestorDenies(t *testing.T) {
	devs := newTestDevices(t)
	podRel := "kubepods/pod" + testUID
	tests := []struct {
		name              string
		ancestor          asm.Instructions
		ancFlags, ctrFlag uint32
		denies            bool
	}{
		{"deny-all with ALLOW_MULTI", denyAllProgram, unix.BPF_F_ALLOW_MULTI, unix.BPF_F_ALLOW_MULTI, true},
		{"allow-all with ALLOW_MULTI", allowAllProgram, unix.BPF_F_ALLOW_MULTI, unix.BPF_F_ALLOW_MULTI, false},
		{"deny-all overridden by the container's", denyAllProgram, unix.BPF_F_ALLOW_OVERRIDE, unix.BPF_F_ALLOW_OVERRIDE, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := newCgroupTree(t, v2Hierarchy, podRel+"/"+computeID)
			pod := filepath.Join(base, podRel)
			compute := filepath.Join(pod, computeID)
			attachDeviceProgram(t, pod, tt.ancestor, tt.ancFlags)
			attachRuntimeProgram(t, compute, tt.ctrFlag)
			r := NewV2(base)
			if err := r.Allow(container(computeID), devs.loop); err != nil {
				t.Fatal(err)
			}
			ok, err := r.Allowed(container(computeID), devs.loop)
			if !tt.denies {
				if err != nil || !ok {
					t.Fatalf("Allowed = %v, %v; want true", ok, err)
				}
				devs.check(t, "ancestor lets it through", compute, wantOpen{loop: true, null: true, urandom: false})
				return
			}
			if ok || !errors.Is(err, ErrAncestorDenies) || !strings.Contains(err.Error(), `"`+pod+`"`) {
				t.Fatalf("Allowed = %v, %v; want false with ErrAncestorDenies naming %q", ok, err, pod)
			}
			t.Logf("Allowed: %v", err)
			devs.check(t, "ancestor denies", compute, wantOpen{loop: false, null: false, urandom: false})
		})
	}
}
