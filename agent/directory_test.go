// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/hpmount/hpmount/kubevirt"
)

// TestReconcileDirectoryVolumes: a memory-dump and a utility volume are
// attached as directories, get no growth check, and stay while in spec; a
// directory volume that leaves the spec is detached like any other.
func TestReconcileDirectoryVolumes(t *testing.T) {
	ta := standardAgent(t, nil)
	ctx := context.Background()
	ta.setVMI(t, vmiObject(
		vol{Name: "dump", Claim: "c1", AttachUID: attachUID, MemoryDump: true},
		vol{Name: "backup", Claim: "c2", AttachUID: attachUID, Utility: true}))
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	want := []string{"attach backup Directory attach-uid/pv-2", "attach dump Directory attach-uid/pv-1"}
	if got := ta.engine.changing(); !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if ev := ta.events(); !hasEvent(ev, "Normal VolumeMounted") {
		t.Fatalf("events = %v", ev)
	}
	ta.engine.reset()
	ta.resync[testKey] = true
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); len(got) != 0 {
		t.Fatalf("a resync of mounted directory volumes made calls %v (no growth, no verify)", got)
	}

	ta.engine.reset()
	ta.setVMI(t, vmiObject(vol{Name: "dump", Claim: "c1", AttachUID: attachUID, MemoryDump: true}))
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"detach launcher-uid backup"}) {
		t.Fatalf("calls after the utility volume left = %v", got)
	}
}

// TestPlanDirectoryKeptWhileInSpec: what belongs to a utility volume is
// never planned for detach while spec.utilityVolumes names it, even
// without a status entry or attachment pod.
func TestPlanDirectoryKeptWhileInSpec(t *testing.T) {
	vmi := kubevirt.VMI{Spec: kubevirt.VMISpec{UtilityVolumes: []kubevirt.UtilityVolume{{Name: "backup", ClaimName: "c"}}}}
	plan := buildPlan(planInput{VMI: &vmi, Observed: []ObservedVolume{
		healthyObserved("backup", kubevirt.Directory),
		{Name: "backup-leftover", Mode: kubevirt.Directory},
	}, Resync: true, GrowFilesystems: true})
	if len(plan) != 1 || plan[0].Name != "backup-leftover" || plan[0].Kind != "detach" {
		t.Fatalf("plan = %+v, want only the leftover detached", plan)
	}
}
