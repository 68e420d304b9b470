package agent

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/kubevirt"
)

// volumeIntent is the agent's view of one hotpluggable volume of the VMI:
// what the ownership rules say (kubevirt.HotplugVolume) plus what the
// engine needs to attach it.
type volumeIntent struct {
	kubevirt.HotplugVolume
	Desired DesiredVolume
	// Attachable: the attachment pod is verified and the PV is known, so
	// Attach may be called.
	Attachable bool
	// Transient is an API error that should retry the reconcile.
	Transient error
}

// pvResolver maps a claim to its bound PV name.
type pvResolver func(namespace, claim string) (string, error)

// buildIntents computes the intent for every hotpluggable volume of the
// VMI, for the given verified launcher.
func buildIntents(vmi *kubevirt.VMI, launcher *corev1.Pod, pods kubevirt.PodLookup, resolve pvResolver) []volumeIntent {
	var out []volumeIntent
	for _, hv := range kubevirt.HotplugVolumes(vmi, launcher, pods) {
		in := volumeIntent{HotplugVolume: hv, Desired: DesiredVolume{
			Name:               hv.Name,
			Mode:               hv.Mode,
			LauncherUID:        launcher.UID,
			ComputeContainerID: kubevirt.ComputeContainerID(launcher),
			CapacityBytes:      hv.CapacityBytes,
			FilesystemOverhead: hv.FilesystemOverhead,
			Source:             Source{AttachmentPodUID: hv.AttachPodUID},
		}}
		if hv.AttachPod != nil {
			pv, err := resolve(vmi.Namespace, hv.Claim)
			if err != nil {
				in.Transient, in.Pending = err, err.Error()
			} else {
				in.Desired.Source.PVName, in.Attachable = pv, true
			}
		}
		out = append(out, in)
	}
	return out
}
