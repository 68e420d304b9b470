package kubevirt

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Why a volume that is not refused cannot be attached yet.
const (
	PendingNoAttachPod  = "no attachment pod in status.volumeStatus yet"
	PendingAttachAbsent = "attachment pod is not in this node's pod cache"
)

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

// HotplugVolumes judges every hotpluggable volume of vmi for launcher, in
// spec order. Volumes without a status entry or attachment pod yet are
// pending; they are still in spec.volumes and so are never detached.
func HotplugVolumes(vmi *VMI, launcher *corev1.Pod, pods PodLookup) []HotplugVolume {
	var out []HotplugVolume
	for _, v := range vmi.Spec.Volumes {
		claim, ok := v.Hotpluggable()
		if !ok {
			continue
		}
		hv := judgeVolume(vmi, v.Name, claim, launcher, pods)
		if hv.Refused != nil {
			r := *hv.Refused
			r.Message = fmt.Sprintf("volume %q: %s", v.Name, r.Message)
			hv.Refused = &r
		}
		out = append(out, hv)
	}
	return out
}

func judgeVolume(vmi *VMI, name, claim string, launcher *corev1.Pod, pods PodLookup) HotplugVolume {
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
		if info != nil && info.ClaimName != "" && claim == "" {
			hv.Claim = info.ClaimName
		}
	}
	switch {
	case hv.Mode != Filesystem && hv.Mode != Block:
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
