// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	corev1 "k8s.io/api/core/v1"
)

func TestBuildPlan(t *testing.T) {
	spec := &kubevirt.VMI{Spec: kubevirt.VMISpec{Volumes: []kubevirt.Volume{
		{Name: "a", PersistentVolumeClaim: &kubevirt.PVCVolumeSource{ClaimName: "ca", Hotpluggable: true}},
		{Name: "b", PersistentVolumeClaim: &kubevirt.PVCVolumeSource{ClaimName: "cb", Hotpluggable: true}},
	}}}
	// zz left the spec, but virt-launcher has not detached its disk yet;
	// zy's disk is detached (no target), its entry not yet removed.
	hp := &kubevirt.HotplugVolumeStatus{}
	unplugging := &kubevirt.VMI{Spec: spec.Spec, Status: kubevirt.VMIStatus{VolumeStatus: []kubevirt.VolumeStatus{
		{Name: "a", Target: "sda", HotplugVolume: hp}, {Name: "zz", Target: "sdb", HotplugVolume: hp},
		{Name: "zy", Phase: "UnMountedFromPod", HotplugVolume: hp}}}}
	intent := func(name string, mode kubevirt.VolumeMode, attachable bool) volumeIntent {
		return volumeIntent{HotplugVolume: kubevirt.HotplugVolume{Name: name, Mode: mode},
			Desired: DesiredVolume{Name: name, Mode: mode, LauncherUID: launcherUID}, Attachable: attachable}
	}
	unchanged := func(string, int64) bool { return false }
	tests := []struct {
		name string
		in   planInput
		want []string
	}{
		{"all healthy is empty", planInput{VMI: spec,
			Intents:  []volumeIntent{intent("a", kubevirt.Filesystem, true), intent("b", kubevirt.Block, true)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Block)}}, nil},
		{"missing is attached", planInput{VMI: spec,
			Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)}}, []string{"attach a"}},
		{"stacked is repaired", planInput{VMI: spec, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)},
			Observed: []ObservedVolume{{Name: "a", Mode: kubevirt.Filesystem, Mounted: true, Stacked: 2}}}, []string{"attach a"}},
		{"gone source is repaired", planInput{VMI: spec, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)},
			Observed: []ObservedVolume{{Name: "a", Mode: kubevirt.Filesystem, Mounted: true, Stacked: 1, SourceGone: true}}}, []string{"attach a"}},
		{"removed from spec is detached first", planInput{VMI: spec, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)},
			Observed: []ObservedVolume{healthyObserved("zz", kubevirt.Filesystem)}}, []string{"detach zz", "attach a"}},
		{"a target virt-handler's record names is left to it", planInput{VMI: spec, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)},
			LeftToHandler: func(n string) bool { return n == "zz" },
			Observed:      []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("zz", kubevirt.Filesystem), healthyObserved("zy", kubevirt.Block)}},
			[]string{"detach zy", "detach zz (left to virt-handler)"}},
		{"a volume the domain still holds is not detached yet", planInput{VMI: unplugging, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("zz", kubevirt.Filesystem), healthyObserved("zy", kubevirt.Block)}},
			[]string{"detach zy"}},
		{"an unread record detaches nothing", planInput{VMI: spec, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true)}, NoDetach: true,
			Observed: []ObservedVolume{healthyObserved("zz", kubevirt.Filesystem)}}, []string{"attach a"}},
		{"vmi gone detaches all", planInput{Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Block)}},
			[]string{"detach a", "detach b"}},
		{"not attachable healthy is kept", planInput{VMI: spec, Intents: []volumeIntent{intent("a", kubevirt.Filesystem, false)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem)}}, nil},
		{"refused healthy is kept", planInput{VMI: spec,
			Intents: []volumeIntent{{HotplugVolume: kubevirt.HotplugVolume{Name: "a", Refused: &kubevirt.Refusal{Reason: "x"}},
				Desired: DesiredVolume{Name: "a", Mode: kubevirt.Filesystem}}},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem)}}, nil},
		{"resync verifies block and grows", planInput{VMI: spec, Resync: true, GrowFilesystems: true,
			Intents:  []volumeIntent{intent("a", kubevirt.Filesystem, true), intent("b", kubevirt.Block, true)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Block)}},
			[]string{"verify b", "grow a", "grow b"}},
		{"resync verifies the rule of a block node no pod publishes", planInput{VMI: spec, Resync: true,
			Intents:  []volumeIntent{intent("b", kubevirt.Block, false)},
			Observed: []ObservedVolume{healthyObserved("b", kubevirt.Block)}},
			[]string{"verify b", "grow b"}},
		{"a new compute container verifies block nodes only", planInput{VMI: spec, VerifyBlock: true, GrowFilesystems: true,
			Intents:  []volumeIntent{intent("a", kubevirt.Filesystem, true), intent("b", kubevirt.Block, true)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Block)}},
			[]string{"verify b"}},
		{"resync without grow-filesystems", planInput{VMI: spec, Resync: true,
			Intents:  []volumeIntent{intent("a", kubevirt.Filesystem, true)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem)}}, nil},
		{"a volume whose storage does not answer gets no growth check", planInput{VMI: spec, Resync: true, GrowFilesystems: true,
			Intents: []volumeIntent{intent("a", kubevirt.Filesystem, true), intent("b", kubevirt.Filesystem, true)},
			Observed: []ObservedVolume{healthyObserved("a", kubevirt.Filesystem),
				func() ObservedVolume {
					o := healthyObserved("b", kubevirt.Filesystem)
					o.Unchecked = ErrStuck
					return o
				}()}},
			[]string{"grow a"}},
		{"capacity change grows", planInput{VMI: spec, GrowFilesystems: true,
			CapacityChanged: func(n string, _ int64) bool { return n == "a" },
			Intents:         []volumeIntent{intent("a", kubevirt.Filesystem, true), intent("b", kubevirt.Filesystem, true)},
			Observed:        []ObservedVolume{healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Filesystem)}},
			[]string{"grow a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.CapacityChanged == nil {
				tt.in.CapacityChanged = unchanged
			}
			var got []string
			for _, o := range buildPlan(tt.in) {
				s := string(o.Kind) + " " + o.Name
				if o.LeftToHandler {
					s += " (left to virt-handler)"
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("plan = %v, want %v", got, tt.want)
			}
		})
	}
}

// standard fixture: one filesystem volume "hp" on claim c1 bound to pv-1.
func standardAgent(t *testing.T, mut func(*Config)) *testAgent {
	ta := newTestAgent(t, mut, pvc("c1", "pv-1"), pvc("c2", "pv-2"))
	ta.addPods(t, launcherPod(), attachmentPod())
	return ta
}

func TestReconcileAttachThenEmptyPlan(t *testing.T) {
	ta := standardAgent(t, nil)
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}))
	ctx := context.Background()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	got := ta.engine.changing()
	want := []string{"attach blk Block attach-uid/pv-2", "attach hp Filesystem attach-uid/pv-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if ev := ta.events(); !hasEvent(ev, "Normal VolumeMounted") {
		t.Fatalf("events = %v", ev)
	}
	// The growth checks need a snapshot taken after the attach: the next
	// pass queues them on the growth runner, and the pass after they ran
	// reports them.
	ta.engine.reset()
	ta.growPass(t)
	// Growth checks run side by side (growthChecksAtOnce): in any order.
	if got, want := slices.Sorted(slices.Values(ta.engine.changing())), []string{"grow blk 10737418240", "grow hp 10737418240"}; !slices.Equal(got, want) {
		t.Fatalf("second pass calls = %v, want %v", got, want)
	}
	ta.engine.reset()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); len(got) != 0 {
		t.Fatalf("third reconcile made changing calls %v", got)
	}
	// The second pass's read is still current for this launcher: the
	// third pass shares it and only lists the launcher's directory.
	if calls := ta.engine.calls; !slices.Equal(calls, []string{"observe launcher-uid"}) {
		t.Fatalf("third reconcile calls = %v, want one observe and no new snapshot", calls)
	}
	if ev := ta.events(); len(ev) != 0 {
		t.Fatalf("second reconcile events = %v", ev)
	}
}

func TestReconcileAdoptOnStart(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem))
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); len(got) != 0 {
		t.Fatalf("adopting a correct mount made calls %v", got)
	}
}

func TestReconcileDetachRemovedFromSpec(t *testing.T) {
	ta := standardAgent(t, nil)
	ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem), healthyObserved("old", kubevirt.Filesystem), healthyObserved("root", kubevirt.Filesystem))
	// "root" is a non-hotpluggable volume still in spec: never detached.
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "root", Claim: "rc", NotHotplug: true}))
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
	var detaches []string
	for _, c := range ta.engine.changing() {
		if strings.HasPrefix(c, "detach") || strings.HasPrefix(c, "attach") {
			detaches = append(detaches, c)
		}
	}
	if !slices.Equal(detaches, []string{"detach launcher-uid old"}) {
		t.Fatalf("calls = %v", detaches)
	}
	if ev := ta.events(); !hasEvent(ev, "Normal VolumeUnmounted") {
		t.Fatalf("events = %v", ev)
	}
}

func TestReconcileVMIDeletedCleansAndForgets(t *testing.T) {
	ta := standardAgent(t, nil)
	u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	ta.setVMI(t, u)
	ctx := context.Background()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	ta.engine.reset()
	if err := ta.vmiInformer.GetIndexer().Delete(u); err != nil {
		t.Fatal(err)
	}
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"detach launcher-uid hp"}) {
		t.Fatalf("calls = %v", got)
	}
	if _, ok := ta.states[testKey]; ok {
		t.Fatal("state of a deleted VMI is still remembered")
	}
}

func TestReconcileLauncherGoneCleans(t *testing.T) {
	ta := standardAgent(t, nil)
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	ctx := context.Background()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	ta.engine.reset()
	if err := ta.podInformer.GetIndexer().Delete(launcherPod()); err != nil {
		t.Fatal(err)
	}
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"detach launcher-uid hp"}) {
		t.Fatalf("calls = %v", got)
	}
}

func TestReconcileTerminatedLauncherCleans(t *testing.T) {
	ta := standardAgent(t, nil)
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	ctx := context.Background()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	ta.engine.reset()
	ta.addPods(t, launcherPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"detach launcher-uid hp"}) {
		t.Fatalf("calls = %v", got)
	}
}

func TestReconcileNeverDetachesOnAPIErrorOrRefusal(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, ta *testAgent)
		vols   []vol
		errors bool
		event  string
	}{
		{
			name: "claim not bound",
			setup: func(t *testing.T, ta *testAgent) {
				ta.setClaim(t, pvc("c1", ""))
			},
			vols:   []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}, {Name: "new", Claim: "c2", AttachUID: attachUID}},
			errors: true,
		},
		{
			name: "claim not found",
			setup: func(t *testing.T, ta *testAgent) {
				ta.deleteClaim(t, "c1")
			},
			vols:   []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}},
			errors: true,
		},
		{
			name: "attachment pod replaced and gone",
			vols: []vol{{Name: "hp", Claim: "c1", AttachUID: "replaced-uid"}},
		},
		{
			name: "attachment pod no longer publishes",
			setup: func(t *testing.T, ta *testAgent) {
				ta.engine.attachErr["hp"] = fmt.Errorf("stat source: %w", kubelet.ErrNotPublished)
				ta.engine.setObserved(launcherUID, ObservedVolume{Name: "hp", Mode: kubevirt.Block, DeviceMajor: 8, DeviceMinor: 16})
				ta.resync[testKey] = true
			},
			vols: []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID, Mode: "Block"}},
		},
		{
			name: "attachment pod of another launcher",
			setup: func(t *testing.T, ta *testAgent) {
				ta.addPods(t, attachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = otherPodUID }))
			},
			vols:  []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}},
			event: "Warning HotplugRefused",
		},
		{
			name: "launcher fails a check",
			setup: func(t *testing.T, ta *testAgent) {
				ta.addPods(t, launcherPod(func(p *corev1.Pod) { p.Spec.Volumes = nil }))
			},
			vols:  []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}},
			event: "Warning HotplugRefused",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := standardAgent(t, nil)
			if len(ta.engine.observed[launcherUID]) == 0 {
				ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem))
			}
			// The launcher is known from an earlier reconcile.
			ta.stateFor(testKey, kt.VMIUID).launchers[launcherUID] = true
			if tt.setup != nil {
				tt.setup(t, ta)
			}
			ta.setVMI(t, vmiObject(tt.vols...))
			err := ta.reconcile(context.Background(), testKey)
			if (err != nil) != tt.errors {
				t.Fatalf("reconcile err = %v, want error %v", err, tt.errors)
			}
			for _, c := range ta.engine.changing() {
				if strings.HasPrefix(c, "detach") {
					t.Fatalf("detached: %v", ta.engine.changing())
				}
			}
			if _, ok := ta.engine.observed[launcherUID]["hp"]; !ok {
				t.Fatal("healthy mount was removed")
			}
			if ev := ta.events(); tt.event != "" && !hasEvent(ev, tt.event) {
				t.Fatalf("events = %v, want %q", ev, tt.event)
			}
		})
	}
}

func TestReconcileGrowReports(t *testing.T) {
	tests := []struct {
		name   string
		result GrowResult
		err    error
		event  string
		text   string
		before string // an earlier claim capacity
	}{
		{"grown", GrowResult{DeviceBytes: 10 << 30, FilesystemBefore: 5 << 30, FilesystemAfter: 10 << 30, FilesystemType: "xfs", Grown: true},
			nil, "Normal FilesystemExpanded", "grew from 5Gi to 10Gi", ""},
		{"missing capability", GrowResult{}, errors.New("grow ext4 on \"/dev/loop3\": operation not permitted (needs CAP_SYS_RESOURCE)"),
			"Warning FilesystemExpansionFailed", "CAP_SYS_RESOURCE", ""},
		{"shrink ignored", GrowResult{DeviceBytes: 20 << 30}, nil, "Warning ShrinkIgnored", "below the current size 20Gi", "30Gi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := standardAgent(t, nil)
			ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem))
			ta.engine.grow["hp"], ta.engine.growErr["hp"] = tt.result, tt.err
			if tt.before != "" {
				// The claim had a larger size before: a shrink is a claim
				// that went down.
				ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID, Capacity: tt.before}))
				ta.growPass(t)
			}
			ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
			ta.growPass(t)
			ev := ta.events()
			found := false
			for _, e := range ev {
				if strings.HasPrefix(e, tt.event) && strings.Contains(e, tt.text) {
					found = true
				}
			}
			if !found {
				t.Fatalf("events = %v, want %q with %q", ev, tt.event, tt.text)
			}
			// Same capacity again: no second growth check, no repeated event.
			ta.engine.reset()
			if err := ta.reconcile(context.Background(), testKey); err != nil {
				t.Fatal(err)
			}
			if got := ta.engine.changing(); len(got) != 0 {
				t.Fatalf("calls = %v", got)
			}
			// Capacity grew in the VMI status: checked again.
			ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID, Capacity: "30Gi"}))
			ta.growPass(t)
			if got := ta.engine.changing(); !slices.Equal(got, []string{"grow hp 32212254720"}) {
				t.Fatalf("calls = %v", got)
			}
		})
	}
}

// TestClaimRecreatedUnderTheSameName: a claim deleted and created again,
// bound to another PV, reaches the node through a new attachment pod (the
// old one held the claim), and is attached from the new PV without an
// agent restart.
func TestClaimRecreatedUnderTheSameName(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"attach hp Filesystem attach-uid/pv-1"}) {
		t.Fatalf("calls = %v", got)
	}
	ta.deleteClaim(t, "c1")
	ta.setClaim(t, pvc("c1", "pv-new"))
	ta.addPods(t, attachmentPod(func(p *corev1.Pod) { p.UID = "attach-uid-2" }))
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: "attach-uid-2"}))
	ta.engine.reset()
	ta.engine.setObserved(launcherUID) // the old volume's mount went with it
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"attach hp Filesystem attach-uid-2/pv-new"}) {
		t.Fatalf("calls after the claim was recreated = %v", got)
	}
}

// TestDetachFailureWarnsOnce: a detach that keeps failing is retried, but
// its Warning is sent once, not on every pass (issue 10, defect 10).
func TestDetachFailureWarnsOnce(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	ta.engine.setObserved(launcherUID, healthyObserved("old", kubevirt.Filesystem))
	ta.engine.detachErr["old"] = errors.New("device or resource busy")
	ta.setVMI(t, vmiObject())
	for range 3 {
		if err := ta.reconcile(context.Background(), testKey); err == nil {
			t.Fatal("a failed detach reconciled without error")
		}
	}
	warnings := 0
	for _, e := range ta.events() {
		if strings.HasPrefix(e, "Warning HotplugFailed") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Fatalf("%d HotplugFailed Warnings for one failure repeated three times, want 1", warnings)
	}
}
