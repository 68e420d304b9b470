// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

// TestDecide judges worlds with no engine and no API server: only the
// VMI, the pods and claims the caches would hold, and what the agent
// remembers.
func TestDecide(t *testing.T) {
	const live = types.UID("live-launcher")
	now := metav1.Now()
	terminating := func(p *corev1.Pod) { p.DeletionTimestamp, p.Status.Phase = &now, corev1.PodRunning }
	running := func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }
	stopped := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	vols := []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}, {Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}}
	migrating := func(mut ...func(map[string]any)) *unstructured.Unstructured {
		return kt.Migrating(vmiObject(vols...), mut...)
	}
	remembered := func(migration kubevirt.Migration, launchers ...types.UID) *vmiState {
		st := newVMIState()
		st.uid, st.migration = kt.VMIUID, migrationState{Migration: migration}
		for _, l := range launchers {
			st.launchers[l] = true
		}
		return st
	}
	sourceRole := kubevirt.Migration{UID: kt.MigrationUID, Role: kubevirt.RoleSource, Phase: kubevirt.MigrationRunning}
	targetRole := kubevirt.Migration{UID: kt.MigrationUID, Role: kubevirt.RoleTarget, Phase: kubevirt.MigrationRunning}
	tests := []struct {
		name       string
		node       string
		vmi        *unstructured.Unstructured // nil: in neither cache
		pods       []*corev1.Pod
		remembered *vmiState
		// want
		launcher         types.UID
		clean, abandoned []types.UID
		held             []types.UID
		role             kubevirt.MigrationRole
		handoff, target  bool
		confirmGone      bool
		pending          int
		events           []string // reason and the start of the message
		intents          []string // attachable intents
		noState          bool
	}{
		{
			name: "plain: the launcher and its volumes", node: testNode, vmi: vmiObject(vols...),
			pods:     []*corev1.Pod{launcherPod(running), attachmentPod()},
			launcher: launcherUID, intents: []string{"blk", "hp"},
		},
		{
			name: "no launcher yet: every hotplug volume pending", node: testNode, vmi: vmiObject(vols...),
			pending: 2,
		},
		{
			name: "migration source keeps serving its launcher", node: testNode, vmi: migrating(),
			pods:     []*corev1.Pod{launcherPod(running), attachmentPod()},
			launcher: launcherUID, role: kubevirt.RoleSource, intents: []string{"blk", "hp"},
		},
		{
			name: "migration target at the handoff: first seen, no volumeStatus", node: kt.TargetNode, vmi: migrating(),
			pods:     []*corev1.Pod{kt.TargetLauncher(running), kt.TargetAttachmentPod()},
			launcher: kt.TargetLauncherUID, role: kubevirt.RoleTarget, handoff: true, target: true, intents: []string{"blk", "hp"},
		},
		{
			name: "handoff already seen is not seen again", node: kt.TargetNode, vmi: migrating(),
			pods:       []*corev1.Pod{kt.TargetLauncher(running), kt.TargetAttachmentPod()},
			remembered: remembered(targetRole, kt.TargetLauncherUID),
			launcher:   kt.TargetLauncherUID, role: kubevirt.RoleTarget, target: true, intents: []string{"blk", "hp"},
		},
		{
			name: "failed migration: the target launcher is abandoned and emptied", node: kt.TargetNode,
			vmi:        migrating(func(ms map[string]any) { ms["failed"] = true }),
			pods:       []*corev1.Pod{kt.TargetLauncher(running), kt.TargetAttachmentPod()},
			remembered: remembered(targetRole, kt.TargetLauncherUID),
			clean:      []types.UID{kt.TargetLauncherUID}, abandoned: []types.UID{kt.TargetLauncherUID}, role: kubevirt.RoleTarget,
		},
		{
			name: "aborted migration no longer listed: the launcher mounted into is abandoned", node: kt.TargetNode,
			vmi: func() *unstructured.Unstructured {
				u := migrating(func(ms map[string]any) { ms["abortStatus"] = kubevirt.AbortSucceeded })
				u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(launcherUID): testNode}
				return u
			}(),
			pods:       []*corev1.Pod{kt.TargetLauncher(running), kt.TargetAttachmentPod()},
			remembered: remembered(targetRole, kt.TargetLauncherUID),
			clean:      []types.UID{kt.TargetLauncherUID}, abandoned: []types.UID{kt.TargetLauncherUID}, role: kubevirt.RoleTarget,
		},
		{
			name: "stale activePods entry: the live launcher is chosen, the old one emptied once it stops", node: testNode,
			vmi: func() *unstructured.Unstructured {
				u := vmiObject(vols...)
				u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(launcherUID): testNode, string(live): testNode}
				return u
			}(),
			pods: []*corev1.Pod{launcherPod(terminating),
				launcherPod(running, func(p *corev1.Pod) { p.UID, p.Name = live, "virt-launcher-vm1-live" }),
				attachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = live })},
			remembered: remembered(kubevirt.Migration{}, launcherUID),
			launcher:   live, intents: []string{"blk", "hp"},
			events: []string{"LauncherChosen virt-launcher pod virt-launcher-vm1-live (Running) chosen over virt-launcher-vm1-abcde (Running, terminating)"},
		},
		{
			name: "a remembered launcher that stopped is emptied", node: testNode, vmi: vmiObject(vols...),
			pods:       []*corev1.Pod{launcherPod(stopped)},
			remembered: remembered(kubevirt.Migration{}, launcherUID),
			clean:      []types.UID{launcherUID},
		},
		{
			name: "gone from both caches: its launchers are emptied once the API server confirms", node: testNode,
			pods:       []*corev1.Pod{launcherPod(running)},
			remembered: remembered(kubevirt.Migration{}, launcherUID),
			clean:      []types.UID{launcherUID}, confirmGone: true,
		},
		{
			name: "gone for its migration target: the running source launcher is held", node: testNode,
			pods:       []*corev1.Pod{launcherPod(running)},
			remembered: remembered(sourceRole, launcherUID),
			held:       []types.UID{launcherUID}, role: kubevirt.RoleSource,
		},
		{
			name: "gone for its migration target: a stopped source launcher is emptied", node: testNode,
			pods:       []*corev1.Pod{launcherPod(stopped)},
			remembered: remembered(sourceRole, launcherUID),
			clean:      []types.UID{launcherUID}, role: kubevirt.RoleSource, confirmGone: true,
		},
		{
			name: "gone and never known: nothing to do", node: testNode, noState: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := world{Key: testKey, Namespace: testNS, Name: kt.VMIName, Node: tt.node, Now: time.Unix(1000, 0),
				Pods: podMap(tt.pods...), Claims: staticPV, Remembered: tt.remembered, ReportVolumeStatus: true}
			if tt.vmi != nil {
				w.VMI = kt.Decode(tt.vmi)
			}
			var before *vmiState
			if tt.remembered != nil {
				before = tt.remembered.clone()
			}
			d := decide(w)
			if tt.noState {
				if d.State != nil || d.Ref != nil || len(d.involved()) != 0 {
					t.Fatalf("decision %+v, want nothing", d)
				}
				return
			}
			if got := launcherOf(d); got != tt.launcher {
				t.Errorf("launcher %q, want %q", got, tt.launcher)
			}
			for what, got := range map[string][2][]types.UID{
				"clean": {d.Clean, tt.clean}, "abandoned": {d.Abandoned, tt.abandoned}, "held": {d.Held, tt.held},
			} {
				if !slices.Equal(got[0], got[1]) {
					t.Errorf("%s %v, want %v", what, got[0], got[1])
				}
			}
			if d.State.migration.Role != tt.role || d.Handoff != tt.handoff || d.Target != tt.target || tt.launcher != "" && d.WriteStatus == tt.target {
				t.Errorf("role %q handoff %v target %v writeStatus %v, want %q %v %v", d.State.migration.Role, d.Handoff, d.Target, d.WriteStatus, tt.role, tt.handoff, tt.target)
			}
			if d.Gone != (tt.vmi == nil) || d.ConfirmGone != tt.confirmGone || len(d.Pending) != tt.pending {
				t.Errorf("gone %v confirm %v pending %d, want %v %v %d", d.Gone, d.ConfirmGone, len(d.Pending), tt.vmi == nil, tt.confirmGone, tt.pending)
			}
			if got := eventsOf(d.Events); !slices.EqualFunc(got, tt.events, strings.HasPrefix) {
				t.Errorf("events %q, want %q", got, tt.events)
			}
			if got := attachable(d.Intents); !slices.Equal(got, tt.intents) {
				t.Errorf("attachable intents %v, want %v", got, tt.intents)
			}
			if tt.launcher != "" && !d.State.launchers[tt.launcher] {
				t.Errorf("launcher %q is not remembered", tt.launcher)
			}
			if before != nil && !sameState(before, tt.remembered) {
				t.Errorf("decide changed the remembered state: %+v, was %+v", tt.remembered, before)
			}
		})
	}
}

func podMap(pods ...*corev1.Pod) kubevirt.PodMap {
	m := kubevirt.PodMap{}
	for _, p := range pods {
		m[p.UID] = p
	}
	return m
}

func launcherOf(d decision) types.UID {
	if d.Launcher == nil {
		return ""
	}
	return d.Launcher.UID
}

func eventsOf(events []event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Reason+" "+e.Message)
	}
	return out
}

func attachable(intents []volumeIntent) []string {
	var out []string
	for _, it := range intents {
		if it.Attachable {
			out = append(out, it.Name)
		}
	}
	slices.Sort(out)
	return out
}

func sameState(a, b *vmiState) bool {
	return a.uid == b.uid && a.migration == b.migration && len(a.launchers) == len(b.launchers) &&
		len(a.capacity) == len(b.capacity) && len(a.warned) == len(b.warned) && len(a.wanted) == len(b.wanted)
}
