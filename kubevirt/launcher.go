// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
)

// KubeVirt's names for a live migration.
const (
	// LabelMigrationTargetNode is set on the VMI by virt-controller at the
	// handoff, naming the node of the target launcher: the target node's
	// agent watches VMIs by it, as it watches LabelNodeName.
	LabelMigrationTargetNode = "kubevirt.io/migrationTargetNodeName"
	// LabelMigrationJobUID marks the target launcher and its attachment
	// pod with the migration's UID.
	LabelMigrationJobUID = "kubevirt.io/migrationJobUID"
	// AbortSucceeded is status.migrationState.abortStatus once an abort
	// took effect.
	AbortSucceeded = "Succeeded"
)

// MigrationRole is a node's part in a VMI's migration.
type MigrationRole string

// Roles; RoleNone when the node is neither end or there is no migration.
const (
	RoleNone   MigrationRole = ""
	RoleSource MigrationRole = "source"
	RoleTarget MigrationRole = "target"
)

// MigrationPhase is how far a migration got, as the VMI tells it.
type MigrationPhase string

// Phases of a migration, from status.migrationState.
const (
	MigrationRunning   MigrationPhase = "running"
	MigrationSucceeded MigrationPhase = "succeeded"
	MigrationFailed    MigrationPhase = "failed"
	MigrationAborted   MigrationPhase = "aborted"
)

// Migration is a node's view of the VMI's last migration. The zero value
// is no migration.
type Migration struct {
	UID                    types.UID
	Role                   MigrationRole
	Phase                  MigrationPhase
	SourceNode, TargetNode string
	TargetPod              string
	TargetAttachmentPodUID types.UID
}

// Placement is everything the ownership rules say about a VMI on one
// node, in one call, so that the agent and diag take the same steps in
// the same order: the launcher choice, the VMI as that launcher must judge
// it, and its hotplug volumes.
type Placement struct {
	LauncherChoice
	// AbandonedUIDs are the launchers that must hold nothing: those of
	// Choice.Abandoned, and those of known that the migration abandons,
	// whether or not they are still listed as active pods.
	AbandonedUIDs []types.UID
	// VMI is the VMI as Launcher must judge it (ForLauncher), or the VMI
	// itself without a launcher.
	VMI *VMI
	// Target: Launcher is the target launcher of a migration still
	// running, whose volumeStatus the source's virt-handler owns.
	Target bool
	// ComputeID is Launcher's compute container ID (ComputeContainerID).
	ComputeID string
	// Volumes are the hotplug volumes judged for Launcher, or, without
	// one, unjudged: name, claim, mode and status entry only.
	Volumes []HotplugVolume
}

// Place applies the ownership rules to vmi on node. known are launchers
// the caller has put something into; Place says which of them a failed or
// aborted migration abandons.
func Place(vmi *VMI, node string, pods PodLookup, known []types.UID) Placement {
	p := Placement{LauncherChoice: ChooseLauncher(vmi, node, pods), VMI: vmi}
	for _, pod := range p.Abandoned {
		p.AbandonedUIDs = append(p.AbandonedUIDs, pod.UID)
	}
	for _, uid := range known {
		if pod, ok := pods.PodByUID(uid); ok && p.Migration.Abandons(vmi, pod) && !slices.Contains(p.AbandonedUIDs, uid) {
			p.AbandonedUIDs = append(p.AbandonedUIDs, uid)
		}
	}
	if l := p.Launcher; l != nil {
		m := p.Migration
		p.Target = m.Role == RoleTarget && m.Phase == MigrationRunning && m.IsTargetLauncher(vmi, l)
		p.VMI = ForLauncher(vmi, node, l, pods)
		p.ComputeID = ComputeContainerID(l)
		p.Volumes = HotplugVolumes(p.VMI, l, pods)
		return p
	}
	p.Volumes = unjudgedVolumes(vmi)
	return p
}

// MigrationOf returns node's part in vmi's last migration.
func MigrationOf(vmi *VMI, node string) Migration {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID == "" {
		return Migration{}
	}
	m := Migration{UID: ms.MigrationUID, Phase: MigrationRunning, SourceNode: ms.SourceNode,
		TargetNode: ms.TargetNode, TargetPod: ms.TargetPod, TargetAttachmentPodUID: ms.TargetAttachmentPodUID}
	switch {
	case ms.AbortStatus == AbortSucceeded:
		m.Phase = MigrationAborted
	case ms.Failed:
		m.Phase = MigrationFailed
	case ms.Completed:
		m.Phase = MigrationSucceeded
	}
	switch node {
	case ms.TargetNode:
		m.Role = RoleTarget
	case ms.SourceNode:
		m.Role = RoleSource
	}
	return m
}

// Ended reports whether the migration failed or was aborted: its target
// launcher runs no guest and must hold nothing (kubevirt#17882 leaked the
// target's hotplug mounts here).
func (m Migration) Ended() bool { return m.Phase == MigrationFailed || m.Phase == MigrationAborted }

// String says the migration in a few words, for diag and logs.
func (m Migration) String() string {
	if m.UID == "" {
		return ""
	}
	side := string(m.Role)
	if side == "" {
		side = "bystander"
	}
	return fmt.Sprintf("%s %s (%s -> %s, migration %s)", side, m.Phase, m.SourceNode, m.TargetNode, m.UID)
}

// IsTargetLauncher reports whether pod is the migration's target launcher:
// the pod virt-controller named at the handoff, on the target node.
func (m Migration) IsTargetLauncher(vmi *VMI, pod *corev1.Pod) bool {
	return m.UID != "" && m.TargetPod != "" && pod.Name == m.TargetPod &&
		pod.Namespace == vmi.Namespace && pod.Spec.NodeName == m.TargetNode
}

// Abandons reports whether pod is the target launcher of a migration that
// failed or was aborted: whatever the agent put there must go, even while
// the pod lingers.
func (m Migration) Abandons(vmi *VMI, pod *corev1.Pod) bool {
	return m.Ended() && m.IsTargetLauncher(vmi, pod)
}

// ForLauncher returns the VMI as launcher must be judged. For the target
// launcher of a migration that did not fail, every hotplug volume comes
// from the target attachment pod, whatever status.volumeStatus names:
// during the migration it names the source's attachment pod, on another
// node. A volume whose status already names a pod controlled by launcher
// (after the migration, once virt-controller caught up, or a later
// hotplug) keeps it. Any other VMI is returned as it is; the result is
// never modified in place.
func ForLauncher(vmi *VMI, node string, launcher *corev1.Pod, pods PodLookup) *VMI {
	m := MigrationOf(vmi, node)
	if m.Role != RoleTarget || m.Ended() || m.TargetAttachmentPodUID == "" || !m.IsTargetLauncher(vmi, launcher) {
		return vmi
	}
	out := *vmi
	out.Status.VolumeStatus = slices.Clone(vmi.Status.VolumeStatus)
	for i := range out.Status.VolumeStatus {
		st := &out.Status.VolumeStatus[i]
		if st.HotplugVolume != nil && ownedBy(pods, st.HotplugVolume.AttachPodUID, launcher) {
			continue
		}
		hv := HotplugVolumeStatus{AttachPodUID: m.TargetAttachmentPodUID}
		if p, ok := pods.PodByUID(m.TargetAttachmentPodUID); ok {
			hv.AttachPodName = p.Name
		}
		st.HotplugVolume = &hv
	}
	return &out
}

// ownedBy reports whether the pod uid is in pods and controlled by
// launcher.
func ownedBy(pods PodLookup, uid types.UID, launcher *corev1.Pod) bool {
	if uid == "" {
		return false
	}
	p, ok := pods.PodByUID(uid)
	return ok && CheckAttachmentPod(launcher, p) == nil
}

// LauncherChoice is what the ownership rules say about a VMI's launchers
// on one node.
type LauncherChoice struct {
	// Launcher is the launcher to attach to; nil when none qualifies.
	Launcher *corev1.Pod
	// Refusal is set when an active pod claimed for the node fails a check
	// or no live launcher can be told apart from another.
	Refusal *Refusal
	// Abandoned are live launchers on the node that must hold nothing:
	// the target launcher of a failed or aborted migration.
	Abandoned []*corev1.Pod
	// PassedOver are live launchers of the VMI on the node that Launcher
	// was chosen over, and Why says why, for an Event.
	PassedOver []*corev1.Pod
	Why        string
	// Migration is the node's part in the VMI's last migration.
	Migration Migration
}

// ChooseLauncher picks the VMI's virt-launcher pod on node among the
// VMI's active pods there. Terminated pods never qualify, nor does the
// target launcher of a failed or aborted migration (Abandoned). When more
// than one live launcher is left (status.activePods can keep a stale
// entry after a migration, harvester#10889), the most alive one is chosen:
// a pod not being deleted over one that is, then Running over Pending over
// any other phase. Two equally alive launchers are refused as ambiguous:
// mounting into either could hand the disk to the wrong QEMU.
func ChooseLauncher(vmi *VMI, node string, pods PodLookup) LauncherChoice {
	c := LauncherChoice{Migration: MigrationOf(vmi, node)}
	var candidates []*corev1.Pod
	uids := activePodsOn(vmi, node)
	for _, uid := range uids {
		pod, ok := pods.PodByUID(uid)
		if !ok || PodTerminated(pod) {
			continue
		}
		if r := CheckLauncher(vmi, node, pod); r != nil {
			c.Refusal = r
			continue
		}
		if c.Migration.Abandons(vmi, pod) {
			c.Abandoned = append(c.Abandoned, pod)
			continue
		}
		candidates = append(candidates, pod)
	}
	switch {
	case len(candidates) == 0:
		if c.Refusal == nil && len(uids) == 0 && len(vmi.Status.ActivePods) > 0 && c.Migration.Role != RoleTarget {
			// The VMI is labelled for this node but all its launchers run
			// elsewhere: nothing here may be mounted for it. A migration
			// target whose launcher left the active pods is no fault.
			c.Refusal = refusef(RefusedLauncherNode, "no active virt-launcher pod of the VMI runs on node %q (active pods on %s)",
				node, strings.Join(activePodNodes(vmi), ", "))
		}
	case len(candidates) == 1:
		c.Launcher = candidates[0]
	default:
		c.chooseAmong(node, candidates)
	}
	if c.Launcher != nil {
		c.Refusal = nil
	}
	return c
}

// chooseAmong picks the single most alive of several live launchers, or
// refuses them all.
func (c *LauncherChoice) chooseAmong(node string, candidates []*corev1.Pod) {
	slices.SortStableFunc(candidates, func(a, b *corev1.Pod) int { return liveness(b) - liveness(a) })
	best := candidates[0]
	if liveness(candidates[1]) == liveness(best) {
		c.Refusal = refusef(RefusedLauncherAmbiguous, "%d virt-launcher pods of the VMI on node %q are equally alive (%s)",
			len(candidates), node, describePods(candidates))
		return
	}
	c.Launcher, c.PassedOver = best, candidates[1:]
	c.Why = fmt.Sprintf("virt-launcher pod %s (%s) chosen over %s: the VMI lists %d active pods on node %q",
		best.Name, podLiveness(best), describePods(c.PassedOver), len(candidates), node)
}

// liveness ranks how alive a launcher is: deletion first, then phase.
func liveness(p *corev1.Pod) int {
	n := 0
	if p.DeletionTimestamp == nil {
		n += 10
	}
	switch p.Status.Phase {
	case corev1.PodRunning:
		n += 2
	case corev1.PodPending:
		n++
	}
	return n
}

func podLiveness(p *corev1.Pod) string {
	phase := string(p.Status.Phase)
	if phase == "" {
		phase = "no phase"
	}
	if p.DeletionTimestamp != nil {
		return phase + ", terminating"
	}
	return phase
}

func describePods(pods []*corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		parts = append(parts, fmt.Sprintf("%s (%s)", p.Name, podLiveness(p)))
	}
	return strings.Join(parts, ", ")
}

// PodTerminated reports whether all containers of the pod have stopped for
// good. A terminated launcher runs no QEMU; its mounts must go, or the
// kubelet cannot tear down its emptyDir and the pod never disappears.
func PodTerminated(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	// A deleted pod whose containers all stopped: the kubelet is tearing
	// down its volumes and waits for our mounts to go.
	if pod.DeletionTimestamp == nil || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// FindLauncher is ChooseLauncher for callers that need only the launcher
// or the refusal: (nil, nil) when no live launcher of the VMI is on node.
func FindLauncher(vmi *VMI, node string, pods PodLookup) (*corev1.Pod, *Refusal) {
	c := ChooseLauncher(vmi, node, pods)
	return c.Launcher, c.Refusal
}

// activePodsOn lists the UIDs status.activePods places on node, sorted.
func activePodsOn(vmi *VMI, node string) []types.UID {
	var uids []types.UID
	for uid, n := range vmi.Status.ActivePods {
		if n == node {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	return uids
}

// ActivePodsOn lists the UIDs of the VMI's active pods on node, sorted.
func ActivePodsOn(vmi *VMI, node string) []types.UID { return activePodsOn(vmi, node) }

func activePodNodes(vmi *VMI) []string {
	var nodes []string
	for _, n := range vmi.Status.ActivePods {
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	return nodes
}

// CheckLauncher verifies that pod is the VMI's virt-launcher on node: on
// that node, in the VMI's namespace, labelled for the VMI, with the
// hotplug-disks emptyDir.
func CheckLauncher(vmi *VMI, node string, pod *corev1.Pod) *Refusal {
	switch {
	case pod.Spec.NodeName != node:
		return refusef(RefusedLauncherNode, "virt-launcher pod %s/%s runs on node %q, not %q", pod.Namespace, pod.Name, pod.Spec.NodeName, node)
	case pod.Namespace != vmi.Namespace:
		return refusef(RefusedLauncherNamespace, "virt-launcher pod %s/%s is not in the VMI's namespace %q", pod.Namespace, pod.Name, vmi.Namespace)
	case pod.Labels[LabelApp] != AppVirtLauncher || pod.Labels[LabelCreatedBy] != string(vmi.UID):
		return refusef(RefusedLauncherLabels, "pod %s/%s is not labelled %s=%s, %s=%s", pod.Namespace, pod.Name, LabelApp, AppVirtLauncher, LabelCreatedBy, vmi.UID)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == kubelet.HotplugDisksVolume && v.EmptyDir != nil {
			return nil
		}
	}
	return refusef(RefusedLauncherNoHotplug, "virt-launcher pod %s/%s has no emptyDir volume %q", pod.Namespace, pod.Name, kubelet.HotplugDisksVolume)
}
