// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

func migratingVMI(mut ...func(map[string]any)) *kubevirt.VMI {
	return kt.Decode(kt.Migrating(kt.VMIObject(
		kt.Vol{Name: "fs", Claim: "c1", AttachUID: kt.AttachUID},
		kt.Vol{Name: "raw", Claim: "c2", AttachUID: kt.AttachUID, Mode: "Block"},
	), mut...))
}

func set(k string, v any) func(map[string]any) { return func(ms map[string]any) { ms[k] = v } }

func TestMigrationOf(t *testing.T) {
	tests := []struct {
		name  string
		mut   []func(map[string]any)
		node  string
		role  kubevirt.MigrationRole
		phase kubevirt.MigrationPhase
	}{
		{"target while running", nil, kt.TargetNode, kubevirt.RoleTarget, kubevirt.MigrationRunning},
		{"source while running", nil, kt.Node, kubevirt.RoleSource, kubevirt.MigrationRunning},
		{"bystander", nil, "node3", kubevirt.RoleNone, kubevirt.MigrationRunning},
		{"completed", []func(map[string]any){set("completed", true)}, kt.TargetNode, kubevirt.RoleTarget, kubevirt.MigrationSucceeded},
		{"failed", []func(map[string]any){set("failed", true)}, kt.TargetNode, kubevirt.RoleTarget, kubevirt.MigrationFailed},
		{"abort requested is still running", []func(map[string]any){set("abortRequested", true), set("abortStatus", "Aborting")},
			kt.TargetNode, kubevirt.RoleTarget, kubevirt.MigrationRunning},
		{"aborted", []func(map[string]any){set("abortRequested", true), set("abortStatus", "Succeeded"), set("failed", true)},
			kt.TargetNode, kubevirt.RoleTarget, kubevirt.MigrationAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := kubevirt.MigrationOf(migratingVMI(tt.mut...), tt.node)
			if m.Role != tt.role || m.Phase != tt.phase || m.UID != kt.MigrationUID || m.TargetAttachmentPodUID != kt.TargetAttachUID {
				t.Fatalf("migration %+v, want role %q phase %q", m, tt.role, tt.phase)
			}
		})
	}
	t.Run("no migration state", func(t *testing.T) {
		if m := kubevirt.MigrationOf(kt.Decode(kt.VMIObject()), kt.Node); m != (kubevirt.Migration{}) || m.String() != "" {
			t.Fatalf("migration %+v", m)
		}
	})
}

// migrationPods is both nodes' pods; each node's cache holds only its
// own, which is what the lookups below see.
func migrationPods(node string, mut ...func(kubevirt.PodMap)) kubevirt.PodMap {
	pods := kubevirt.PodMap{kt.LauncherUID: kt.Launcher(), kt.AttachUID: kt.AttachmentPod()}
	if node == kt.TargetNode {
		pods = kubevirt.PodMap{kt.TargetLauncherUID: kt.TargetLauncher(), kt.TargetAttachUID: kt.TargetAttachmentPod()}
	}
	for _, m := range mut {
		m(pods)
	}
	return pods
}

func TestChooseLauncherMigration(t *testing.T) {
	tests := []struct {
		name          string
		vmi           *kubevirt.VMI
		node          string
		want          types.UID
		abandoned     types.UID
		refusal       string
		fromAttachPod types.UID // where each volume comes from for the chosen launcher
	}{
		{name: "target node: the target launcher, volumes from the target attachment pod",
			vmi: migratingVMI(), node: kt.TargetNode, want: kt.TargetLauncherUID, fromAttachPod: kt.TargetAttachUID},
		{name: "source node: the source launcher, volumes as status says",
			vmi: migratingVMI(), node: kt.Node, want: kt.LauncherUID, fromAttachPod: kt.AttachUID},
		{name: "target node after success keeps the target attachment pod",
			vmi: migratingVMI(set("completed", true)), node: kt.TargetNode, want: kt.TargetLauncherUID, fromAttachPod: kt.TargetAttachUID},
		{name: "target node after failure: the target launcher is abandoned",
			vmi: migratingVMI(set("failed", true)), node: kt.TargetNode, abandoned: kt.TargetLauncherUID},
		{name: "target node after an abort: the target launcher is abandoned",
			vmi: migratingVMI(set("abortStatus", "Succeeded")), node: kt.TargetNode, abandoned: kt.TargetLauncherUID},
		{name: "source node after failure keeps its launcher",
			vmi: migratingVMI(set("failed", true)), node: kt.Node, want: kt.LauncherUID, fromAttachPod: kt.AttachUID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := migrationPods(tt.node)
			c := kubevirt.ChooseLauncher(tt.vmi, tt.node, pods)
			if c.Refusal != nil {
				t.Fatalf("refusal %v", c.Refusal)
			}
			if got := uidOf(c.Launcher); got != tt.want {
				t.Fatalf("launcher %q, want %q", got, tt.want)
			}
			if tt.abandoned != "" && (len(c.Abandoned) != 1 || c.Abandoned[0].UID != tt.abandoned) {
				t.Fatalf("abandoned %v, want %q", c.Abandoned, tt.abandoned)
			}
			if c.Launcher == nil {
				return
			}
			for _, hv := range kubevirt.HotplugVolumes(kubevirt.ForLauncher(tt.vmi, tt.node, c.Launcher, pods), c.Launcher, pods) {
				if hv.Refused != nil || hv.AttachPod == nil || hv.AttachPodUID != tt.fromAttachPod {
					t.Errorf("volume %s: attach pod %q (%v), refused %v, pending %q; want from %q",
						hv.Name, hv.AttachPodUID, hv.AttachPod != nil, hv.Refused, hv.Pending, tt.fromAttachPod)
				}
			}
		})
	}
}

// failedTargetNotActive is a VMI whose migration failed and whose active
// pods no longer list the target launcher.
func failedTargetNotActive() *kubevirt.VMI {
	u := kt.Migrating(kt.VMIObject(kt.Vol{Name: "fs", Claim: "c1", AttachUID: kt.AttachUID}), set("failed", true))
	u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(kt.LauncherUID): kt.Node}
	return kt.Decode(u)
}

// TestPlace: one call gives the launcher, the migration's part, the VMI as
// that launcher judges it and its volumes, as the agent and diag use them.
func TestPlace(t *testing.T) {
	withCompute := func(pods kubevirt.PodMap) {
		pods[kt.LauncherUID] = kt.Launcher(func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kubevirt.ComputeContainer, ContainerID: "containerd://c1"}}
		})
	}
	tests := []struct {
		name       string
		vmi        *kubevirt.VMI
		node       string
		pods       kubevirt.PodMap
		known      []types.UID
		launcher   types.UID
		target     bool
		compute    string
		abandoned  []types.UID
		attachFrom types.UID // "" when the volumes are unjudged
	}{
		{name: "no migration", vmi: kt.Decode(kt.VMIObject(kt.Vol{Name: "fs", Claim: "c1", AttachUID: kt.AttachUID})),
			node: kt.Node, pods: migrationPods(kt.Node, withCompute), launcher: kt.LauncherUID, compute: "containerd://c1", attachFrom: kt.AttachUID},
		{name: "target of a running migration", vmi: migratingVMI(), node: kt.TargetNode, pods: migrationPods(kt.TargetNode),
			launcher: kt.TargetLauncherUID, target: true, attachFrom: kt.TargetAttachUID},
		{name: "source of a running migration", vmi: migratingVMI(), node: kt.Node, pods: migrationPods(kt.Node),
			launcher: kt.LauncherUID, attachFrom: kt.AttachUID},
		{name: "target after success is no longer a target", vmi: migratingVMI(set("completed", true)), node: kt.TargetNode,
			pods: migrationPods(kt.TargetNode), launcher: kt.TargetLauncherUID, attachFrom: kt.TargetAttachUID},
		{name: "failed: the active target launcher is abandoned once", vmi: migratingVMI(set("failed", true)), node: kt.TargetNode,
			pods: migrationPods(kt.TargetNode), known: []types.UID{kt.TargetLauncherUID}, abandoned: []types.UID{kt.TargetLauncherUID}},
		{name: "failed: a known target launcher no longer active is abandoned", node: kt.TargetNode,
			vmi:  failedTargetNotActive(),
			pods: migrationPods(kt.TargetNode), known: []types.UID{kt.TargetLauncherUID, "gone-uid"}, abandoned: []types.UID{kt.TargetLauncherUID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kubevirt.Place(tt.vmi, tt.node, tt.pods, tt.known)
			if got := uidOf(p.Launcher); got != tt.launcher || p.Target != tt.target || p.ComputeID != tt.compute {
				t.Fatalf("launcher %q target %v compute %q, want %q %v %q", got, p.Target, p.ComputeID, tt.launcher, tt.target, tt.compute)
			}
			if !slices.Equal(p.AbandonedUIDs, tt.abandoned) {
				t.Fatalf("abandoned %v, want %v", p.AbandonedUIDs, tt.abandoned)
			}
			if len(p.Volumes) != len(tt.vmi.Spec.HotplugClaims()) {
				t.Fatalf("%d volumes, want one per hotplug claim", len(p.Volumes))
			}
			for _, hv := range p.Volumes {
				if hv.AttachPodUID != tt.attachFrom || (hv.AttachPod != nil) != (tt.attachFrom != "") || hv.Refused != nil {
					t.Errorf("volume %s: attach pod %q (%v), refused %v; want from %q", hv.Name, hv.AttachPodUID, hv.AttachPod != nil, hv.Refused, tt.attachFrom)
				}
			}
		})
	}
}

// TestForLauncherOwnership: the target attachment pod passes the same
// checks as ever, against the target launcher.
func TestForLauncherOwnership(t *testing.T) {
	tests := []struct {
		name    string
		mut     func(kubevirt.PodMap)
		refusal string
		pending string
	}{
		{name: "controlled by another pod", mut: func(p kubevirt.PodMap) {
			p[kt.TargetAttachUID] = kt.TargetAttachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = kt.OtherPodUID })
		}, refusal: kubevirt.RefusedAttachOwner},
		{name: "not labelled hotplug-disk", mut: func(p kubevirt.PodMap) {
			p[kt.TargetAttachUID] = kt.TargetAttachmentPod(func(p *corev1.Pod) { delete(p.Labels, kubevirt.LabelApp) })
		}, refusal: kubevirt.RefusedAttachLabel},
		{name: "not in the node's cache yet", mut: func(p kubevirt.PodMap) { delete(p, kt.TargetAttachUID) },
			pending: kubevirt.PendingAttachAbsent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := migratingVMI()
			pods := migrationPods(kt.TargetNode, tt.mut)
			l := pods[kt.TargetLauncherUID]
			for _, hv := range kubevirt.HotplugVolumes(kubevirt.ForLauncher(vmi, kt.TargetNode, l, pods), l, pods) {
				switch {
				case tt.refusal != "" && (hv.Refused == nil || hv.Refused.Reason != tt.refusal):
					t.Errorf("volume %s: refusal %v, want %q", hv.Name, hv.Refused, tt.refusal)
				case tt.pending != "" && hv.Pending != tt.pending:
					t.Errorf("volume %s: pending %q, want %q", hv.Name, hv.Pending, tt.pending)
				}
			}
		})
	}
	t.Run("the VMI itself is not changed", func(t *testing.T) {
		vmi := migratingVMI()
		pods := migrationPods(kt.TargetNode)
		kubevirt.ForLauncher(vmi, kt.TargetNode, pods[kt.TargetLauncherUID], pods)
		if got := vmi.Status.VolumeStatus[0].HotplugVolume.AttachPodUID; got != kt.AttachUID {
			t.Fatalf("status now names %q", got)
		}
	})
}

// TestChooseLauncherStaleActivePods: two launchers of one VMI on one node
// (a stale activePods entry, harvester#10889) are told apart by deletion
// and phase; only equally alive ones are refused.
func TestChooseLauncherStaleActivePods(t *testing.T) {
	const second = types.UID("second-launcher")
	now := metav1.Now()
	terminating := func(p *corev1.Pod) { p.DeletionTimestamp = &now }
	phase := func(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }
	tests := []struct {
		name          string
		first, second []func(*corev1.Pod)
		want          types.UID
		why           string
		refusal       string
	}{
		{name: "the terminating one is passed over", first: []func(*corev1.Pod){phase(corev1.PodRunning), terminating},
			second: []func(*corev1.Pod){phase(corev1.PodRunning)}, want: second, why: "Running, terminating"},
		{name: "Running over Pending", first: []func(*corev1.Pod){phase(corev1.PodRunning)},
			second: []func(*corev1.Pod){phase(corev1.PodPending)}, want: kt.LauncherUID, why: "Pending"},
		{name: "a terminated one does not count", first: []func(*corev1.Pod){phase(corev1.PodSucceeded)},
			second: []func(*corev1.Pod){phase(corev1.PodRunning)}, want: second},
		{name: "equally alive is ambiguous", first: []func(*corev1.Pod){phase(corev1.PodRunning)},
			second: []func(*corev1.Pod){phase(corev1.PodRunning)}, refusal: kubevirt.RefusedLauncherAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := kt.VMIObject()
			u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(kt.LauncherUID): kt.Node, string(second): kt.Node}
			pods := kubevirt.PodMap{
				kt.LauncherUID: kt.Launcher(tt.first...),
				second:         kt.Launcher(append([]func(*corev1.Pod){func(p *corev1.Pod) { p.UID, p.Name = second, "virt-launcher-vm1-new" }}, tt.second...)...),
			}
			c := kubevirt.ChooseLauncher(kt.Decode(u), kt.Node, pods)
			if tt.refusal != "" {
				if c.Launcher != nil || c.Refusal == nil || c.Refusal.Reason != tt.refusal {
					t.Fatalf("launcher %q refusal %v, want %q", uidOf(c.Launcher), c.Refusal, tt.refusal)
				}
				return
			}
			if c.Refusal != nil || uidOf(c.Launcher) != tt.want {
				t.Fatalf("launcher %q refusal %v, want %q", uidOf(c.Launcher), c.Refusal, tt.want)
			}
			if !strings.Contains(c.Why, tt.why) {
				t.Fatalf("why %q does not say %q", c.Why, tt.why)
			}
			if l, r := kubevirt.FindLauncher(kt.Decode(u), kt.Node, pods); uidOf(l) != tt.want || r != nil {
				t.Fatalf("FindLauncher disagrees: %q %v", uidOf(l), r)
			}
		})
	}
}

func uidOf(p *corev1.Pod) types.UID {
	if p == nil {
		return ""
	}
	return p.UID
}

// TestLauncherVMI: only a VMI that controls the pod is its VMI; another
// owner, or a VMI that is no controller, names none.
func TestLauncherVMI(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name   string
		owners []metav1.OwnerReference
		want   types.UID
	}{
		{"controlled by its VMI", []metav1.OwnerReference{{Kind: kubevirt.VMIKind, Name: "vm1", UID: "vmi-uid", Controller: &yes}}, "vmi-uid"},
		{"a VMI that is no controller", []metav1.OwnerReference{{Kind: kubevirt.VMIKind, Name: "vm1", UID: "vmi-uid", Controller: &no}}, ""},
		{"controlled by another kind", []metav1.OwnerReference{{Kind: "Pod", Name: "p", UID: "pod-uid", Controller: &yes}}, ""},
		{"no owner", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tt.owners}}
			name, uid, ok := kubevirt.LauncherVMI(pod)
			if uid != tt.want || ok != (tt.want != "") || ok && name != "vm1" {
				t.Fatalf("LauncherVMI = %q, %q, %v; want %q", name, uid, ok, tt.want)
			}
		})
	}
}
