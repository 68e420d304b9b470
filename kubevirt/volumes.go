// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
)

// Why a volume that is not refused cannot be attached yet.
const (
	PendingNoAttachPod  = "no attachment pod in status.volumeStatus yet"
	PendingAttachAbsent = "attachment pod is not in this node's pod cache"
)

// MemoryDumpInfo is status.volumeStatus[].memoryDumpVolume; only its
// presence is read.
type MemoryDumpInfo struct {
	ClaimName      string `json:"claimName,omitempty"`
	TargetFileName string `json:"targetFileName,omitempty"`
}

// UtilityVolume is one entry of spec.utilityVolumes: a PVC hotplugged into
// the launcher only (type MemoryDump or Backup), never into the guest.
type UtilityVolume struct {
	Name      string `json:"name"`
	ClaimName string `json:"claimName"`
	Type      string `json:"type,omitempty"`
}

// NamedClaim is a hotplug volume of the spec by name, with its claim.
type NamedClaim struct{ Name, Claim string }

// HotplugClaims lists every hotplug volume of the spec, spec.volumes first,
// then spec.utilityVolumes: what the node may hold for the VMI.
func (s *VMISpec) HotplugClaims() []NamedClaim {
	var out []NamedClaim
	for _, v := range s.Volumes {
		if claim, ok := v.Hotpluggable(); ok {
			out = append(out, NamedClaim{v.Name, claim})
		}
	}
	for _, u := range s.UtilityVolumes {
		out = append(out, NamedClaim{u.Name, u.ClaimName})
	}
	return out
}

// HotplugVolumeNames lists the names of HotplugClaims.
func (s *VMISpec) HotplugVolumeNames() []string {
	var names []string
	for _, c := range s.HotplugClaims() {
		names = append(names, c.Name)
	}
	return names
}

// HotplugVolume is what the ownership rules say about one hotpluggable
// volume of a VMI for its verified launcher. The agent and diag both judge
// volumes from it, so that diag refuses exactly what the agent refuses.
type HotplugVolume struct {
	Name  string
	Claim string
	Mode  VolumeMode
	// Status is the volume's status.volumeStatus entry, nil without one.
	Status *VolumeStatus
	// CapacityBytes and FilesystemOverhead come from the status entry.
	CapacityBytes      int64
	FilesystemOverhead float64
	// AttachPodUID is the attachment pod the status names, "" when none.
	AttachPodUID types.UID
	// AttachPod is that pod once verified to belong to the launcher.
	AttachPod *corev1.Pod
	// Refused: the volume is not touched beyond keeping what is mounted.
	Refused *Refusal
	// Pending says why a volume that is not refused has no verified
	// attachment pod yet.
	Pending string
}

// HotplugVolumes judges every hotpluggable volume of vmi for launcher:
// spec.volumes in order, then spec.utilityVolumes. Volumes without a status
// entry or attachment pod yet are pending; they are still in the spec and
// so are never detached.
//
// A memory-dump volume (spec memoryDump, or a status entry carrying
// memoryDumpVolume, which is what virt-handler goes by) and a utility
// volume get Mode Directory: their PVC's mount root is bound onto the
// directory hotplug-disks/<volume>, never a disk.img. Such a volume must be
// a Filesystem-mode PVC; a Block one is refused (unknown-volume-mode).
func HotplugVolumes(vmi *VMI, launcher *corev1.Pod, pods PodLookup) []HotplugVolume {
	var out []HotplugVolume
	add := func(name, claim string, dir bool, refused *Refusal) {
		hv := judgeVolume(vmi, name, claim, dir, launcher, pods)
		if hv.Refused == nil {
			hv.Refused = refused
		}
		if hv.Refused != nil {
			r := *hv.Refused
			r.Message = fmt.Sprintf("volume %q: %s", name, r.Message)
			hv.Refused = &r
		}
		out = append(out, hv)
	}
	regular := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		regular[v.Name] = true
		if claim, ok := v.Hotpluggable(); ok {
			add(v.Name, claim, v.MemoryDump != nil, nil)
		}
	}
	for _, u := range vmi.Spec.UtilityVolumes {
		var dup *Refusal
		if regular[u.Name] {
			// KubeVirt's validation forbids it; two targets for one name
			// could not both be kept apart from the guest's disk.
			dup = refusef(RefusedUnsafeName, "utility volume name is also a name in spec.volumes")
		}
		add(u.Name, u.ClaimName, true, dup)
	}
	refuseCollisions(out)
	return out
}

// unjudgedVolumes lists vmi's hotplug volumes when no launcher qualifies:
// nothing can be judged without one, so only the name, claim, and the mode
// and entry of the status are known.
func unjudgedVolumes(vmi *VMI) []HotplugVolume {
	var out []HotplugVolume
	for _, c := range vmi.Spec.HotplugClaims() {
		st := vmi.Status.VolumeStatusByName(c.Name)
		out = append(out, HotplugVolume{Name: c.Name, Claim: c.Claim, Mode: st.Mode(), Status: st})
	}
	return out
}

// refuseCollisions refuses a block or directory volume whose target, its
// own name, is the <vol>.img target of a filesystem volume of the same VMI
// (a block volume "x.img" beside a filesystem volume "x"): one name in
// hotplug-disks cannot serve both, and the agent would take the other's
// entry for its own.
func refuseCollisions(vols []HotplugVolume) {
	files := map[string]string{}
	for _, hv := range vols {
		if hv.Refused == nil && hv.Mode == Filesystem {
			files[kubelet.TargetName(hv.Name)] = hv.Name
		}
	}
	for i := range vols {
		hv := &vols[i]
		if other, ok := files[hv.Name]; ok && hv.Refused == nil && hv.Mode != Filesystem {
			hv.Refused = refusef(RefusedUnsafeName, "volume %q: its target %q in hotplug-disks is also the target of filesystem volume %q", hv.Name, hv.Name, other)
		}
	}
	refuseDuplicates(vols)
}

// refuseDuplicates refuses every volume whose entry in hotplug-disks
// another volume of the VMI also uses: the same name twice in
// spec.volumes or spec.utilityVolumes. KubeVirt's webhook forbids it, but
// the API server alone accepts it, and neither volume can then be told to
// be the one the guest means: the agent would bind one claim, then the
// other, onto the same target.
func refuseDuplicates(vols []HotplugVolume) {
	users := map[string]int{}
	for _, hv := range vols {
		if hv.Refused == nil {
			users[hv.entry()]++
		}
	}
	for i := range vols {
		hv := &vols[i]
		if n := users[hv.entry()]; n > 1 && hv.Refused == nil {
			hv.Refused = refusef(RefusedUnsafeName, "volume %q: %d volumes of the VMI use %q in hotplug-disks", hv.Name, n, hv.entry())
		}
	}
}

// entry is the volume's name in hotplug-disks: <name>.img for a file
// bind, the name itself for a block node or a directory.
func (hv *HotplugVolume) entry() string {
	if hv.Mode == Filesystem {
		return kubelet.TargetName(hv.Name)
	}
	return hv.Name
}

func judgeVolume(vmi *VMI, name, claim string, dir bool, launcher *corev1.Pod, pods PodLookup) HotplugVolume {
	hv := HotplugVolume{Name: name, Claim: claim, Mode: Filesystem}
	if hv.Refused = CheckVolumeName(name); hv.Refused != nil {
		return hv
	}
	st := vmi.Status.VolumeStatusByName(name)
	hv.Status = st
	if st != nil {
		info := st.PersistentVolumeClaimInfo
		hv.Mode, hv.CapacityBytes = info.Mode(), info.CapacityBytes()
		if oh, err := info.Overhead(); err == nil {
			hv.FilesystemOverhead = oh
		}
		hv.Claim = claimOf(claim, st)
		dir = dir || st.MemoryDumpVolume != nil
	}
	switch {
	case dir && hv.Mode != Filesystem:
		hv.Refused = refusef(RefusedUnknownMode, "a memory-dump or utility volume is bound as a directory and needs a %s-mode PVC, not %q", Filesystem, hv.Mode)
		return hv
	case dir:
		hv.Mode = Directory
	}
	switch {
	case hv.Mode != Filesystem && hv.Mode != Block && hv.Mode != Directory:
		hv.Refused = refusef(RefusedUnknownMode, "volume mode %q is neither %s nor %s", hv.Mode, Filesystem, Block)
	case st == nil || st.HotplugVolume == nil || st.HotplugVolume.AttachPodUID == "":
		hv.Pending = PendingNoAttachPod
	default:
		hv.AttachPodUID = st.HotplugVolume.AttachPodUID
		pod, ok := pods.PodByUID(hv.AttachPodUID)
		switch {
		case !ok:
			hv.Pending = PendingAttachAbsent
		default:
			if hv.Refused = CheckAttachmentPod(launcher, pod); hv.Refused == nil {
				hv.AttachPod = pod
			}
		}
	}
	return hv
}

// claimOf is the claim of a hotplug volume: the spec's, else the one its
// status names.
func claimOf(spec string, st *VolumeStatus) string {
	if spec == "" && st != nil && st.PersistentVolumeClaimInfo != nil {
		return st.PersistentVolumeClaimInfo.ClaimName
	}
	return spec
}

// ClaimPods maps the claim of each hotplug volume of vmi to the attachment
// pods that pods holds and that carry it: the one its volume status names
// and the migration target's, each only if it is an attachment pod of one
// of the VMI's launchers (OwnedAttachmentPod). A claim with no such pod
// yet is left out: no volume of it can be attached. It is what a node
// needs to read of the VMI's claims, so what the VMI's status names
// without such a pod costs no read.
func ClaimPods(vmi *VMI, pods PodLookup) map[string][]types.UID {
	out := map[string][]types.UID{}
	add := func(claim string, uid types.UID) {
		if claim == "" || uid == "" || slices.Contains(out[claim], uid) {
			return
		}
		if pod, ok := pods.PodByUID(uid); ok && OwnedAttachmentPod(vmi, pod, pods) {
			out[claim] = append(out[claim], uid)
		}
	}
	var target types.UID
	if m := vmi.Status.MigrationState; m != nil {
		target = m.TargetAttachmentPodUID
	}
	for _, nc := range vmi.Spec.HotplugClaims() {
		st := vmi.Status.VolumeStatusByName(nc.Name)
		claim := claimOf(nc.Claim, st)
		if st != nil && st.HotplugVolume != nil {
			add(claim, st.HotplugVolume.AttachPodUID)
		}
		add(claim, target)
	}
	return out
}

// Hotpluggable reports whether the volume is hotpluggable and the claim
// that backs it.
func (v Volume) Hotpluggable() (claim string, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable:
		return v.PersistentVolumeClaim.ClaimName, true
	case v.DataVolume != nil && v.DataVolume.Hotpluggable:
		return v.DataVolume.Name, true
	case v.MemoryDump != nil && v.MemoryDump.Hotpluggable:
		return v.MemoryDump.ClaimName, true
	}
	return "", false
}

// VolumeStatusByName returns the status entry of a volume, or nil.
func (s *VMIStatus) VolumeStatusByName(name string) *VolumeStatus {
	for i := range s.VolumeStatus {
		if s.VolumeStatus[i].Name == name {
			return &s.VolumeStatus[i]
		}
	}
	return nil
}

// HasVolume reports whether spec.volumes or spec.utilityVolumes names the
// volume: while it does, nothing of it is detached.
func (s *VMISpec) HasVolume(name string) bool {
	for _, v := range s.Volumes {
		if v.Name == name {
			return true
		}
	}
	for _, u := range s.UtilityVolumes {
		if u.Name == name {
			return true
		}
	}
	return false
}

// DomainHolds reports whether the VMI's domain may still hold the hotplug
// volume as a disk: its status entry names a disk target. virt-handler sets the
// target from the domain's disks and clears it only once virt-launcher has
// detached the disk, which happens after the volume left the spec.
func (s *VMIStatus) DomainHolds(name string) bool {
	st := s.VolumeStatusByName(name)
	return st != nil && st.holdsDisk()
}

func (s *VolumeStatus) holdsDisk() bool { return s.HotplugVolume != nil && s.Target != "" }

// Keeps reports whether the VMI's launcher keeps the volume: the spec
// names it, or the domain still holds it (DomainHolds). A volume removed
// from the spec is detached only after the domain let it go: before that
// the disk is still QEMU's, and virt-handler's Mount, which walks status,
// would bind again what was removed.
func (v *VMI) Keeps(name string) bool {
	return v.Spec.HasVolume(name) || v.Status.DomainHolds(name)
}

// KeptVolumeNames lists the hotplug volumes the launcher keeps (Keeps):
// those of the spec, then those only the domain still holds.
func (v *VMI) KeptVolumeNames() []string {
	names := v.Spec.HotplugVolumeNames()
	for _, st := range v.Status.VolumeStatus {
		if st.holdsDisk() && !slices.Contains(names, st.Name) {
			names = append(names, st.Name)
		}
	}
	return names
}

// Mode is the volume mode, Filesystem when KubeVirt left it empty.
func (i *PersistentVolumeClaimInfo) Mode() VolumeMode {
	if i == nil || i.VolumeMode == "" {
		return Filesystem
	}
	return VolumeMode(i.VolumeMode)
}

// CapacityBytes is the size the claim is meant to have: the larger of
// capacity.storage and requests.storage, 0 when both are unknown. Requests
// count because of the very case hpmount exists for: once the attachment
// pod was replaced, NodeExpandVolume never runs, so the PVC's
// status.capacity can stay at the old size while the user's request (and
// the device) grew.
func (i *PersistentVolumeClaimInfo) CapacityBytes() int64 {
	if i == nil {
		return 0
	}
	return max(i.Capacity.StorageBytes(), i.Requests.StorageBytes())
}

// Overhead parses filesystemOverhead; empty is 0.
func (i *PersistentVolumeClaimInfo) Overhead() (float64, error) {
	if i == nil || i.FilesystemOverhead == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(i.FilesystemOverhead, 64)
	if err != nil {
		return 0, fmt.Errorf("parse filesystem overhead %q: %w", i.FilesystemOverhead, err)
	}
	if f < 0 || f >= 1 {
		return 0, fmt.Errorf("filesystem overhead %q is not in [0, 1)", i.FilesystemOverhead)
	}
	return f, nil
}

// Mode is the volume mode of a status entry, Filesystem without one.
func (s *VolumeStatus) Mode() VolumeMode {
	if s == nil {
		return Filesystem
	}
	return s.PersistentVolumeClaimInfo.Mode()
}

// OwnedAttachmentPod reports whether pod passes CheckAttachmentPod against
// the pod that controls it, and that pod is one of the VMI's launchers
// (CheckLauncher, on its own node): Place's checks of an attachment pod
// without a launcher chosen yet, so that a pod the VMI's status names
// costs nothing unless Place could accept it.
func OwnedAttachmentPod(vmi *VMI, pod *corev1.Pod, pods PodLookup) bool {
	owner, ok := controllerOf(pod)
	if !ok {
		return false
	}
	launcher, ok := pods.PodByUID(owner)
	return ok && CheckLauncher(vmi, launcher.Spec.NodeName, launcher) == nil && CheckAttachmentPod(launcher, pod) == nil
}

// controllerOf is the UID of the pod's controller, as
// metav1.GetControllerOf finds it, without the copy that one allocates:
// every pass asks it of every volume's attachment pod (ClaimPods).
func controllerOf(pod *corev1.Pod) (types.UID, bool) {
	if r := controllerRef(pod); r != nil {
		return r.UID, true
	}
	return "", false
}

// controllerRef is the pod's controller reference, nil if none.
func controllerRef(pod *corev1.Pod) *metav1.OwnerReference {
	for i := range pod.OwnerReferences {
		if r := &pod.OwnerReferences[i]; r.Controller != nil && *r.Controller {
			return r
		}
	}
	return nil
}

// LauncherVMI is the name and UID of the VMI that controls a virt-launcher
// pod (virt-controller sets it as the pod's controller), in the pod's
// namespace. The orphan sweep, which knows no VMI, finds virt-handler's
// record of a launcher by it.
func LauncherVMI(pod *corev1.Pod) (name string, uid types.UID, ok bool) {
	if r := controllerRef(pod); r != nil && r.Kind == VMIKind {
		return r.Name, r.UID, true
	}
	return "", "", false
}

// CheckAttachmentPod verifies that pod belongs to launcher before any of
// its paths is used: same namespace, labelled kubevirt.io=hotplug-disk, and
// controlled by the launcher.
func CheckAttachmentPod(launcher, pod *corev1.Pod) *Refusal {
	switch {
	case pod.Namespace != launcher.Namespace:
		return refusef(RefusedAttachNamespace, "attachment pod %s/%s is not in the launcher's namespace %q", pod.Namespace, pod.Name, launcher.Namespace)
	case pod.Labels[LabelApp] != AppHotplugDisk:
		return refusef(RefusedAttachLabel, "pod %s/%s is not labelled %s=%s", pod.Namespace, pod.Name, LabelApp, AppHotplugDisk)
	}
	if owner, ok := controllerOf(pod); !ok || owner != launcher.UID {
		return refusef(RefusedAttachOwner, "attachment pod %s/%s is not controlled by virt-launcher pod %s (uid %s)", pod.Namespace, pod.Name, launcher.Name, launcher.UID)
	}
	return nil
}

// ComputeContainer is the virt-launcher container QEMU runs in
// (virt-controller's launcher template). Only it is given a block volume's
// device: the launcher's other containers (guest-console-log, hotplug
// sidecars) never open the volumes.
const ComputeContainer = "compute"

// ComputeContainerID returns the ID the pod status gives the launcher's
// compute container ("containerd://<id>"), or "" while it names none (the
// container has not been created yet). After a restart it names the new
// container, whose cgroup is new and carries no device rule yet.
func ComputeContainerID(launcher *corev1.Pod) string {
	for _, cs := range launcher.Status.ContainerStatuses {
		if cs.Name == ComputeContainer {
			return cs.ContainerID
		}
	}
	return ""
}
