package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Refusal reasons, reported to Observer.Refusal and in Event messages.
const (
	RefusedUnsafeName         = "unsafe-volume-name"
	RefusedUnsafeContent      = "unsafe-content"
	RefusedAttachNamespace    = "attachment-pod-namespace"
	RefusedAttachLabel        = "attachment-pod-label"
	RefusedAttachOwner        = "attachment-pod-owner"
	RefusedLauncherNode       = "launcher-node"
	RefusedLauncherNamespace  = "launcher-namespace"
	RefusedLauncherLabels     = "launcher-labels"
	RefusedLauncherNoHotplug  = "launcher-no-hotplug-disks"
	RefusedLauncherAmbiguous  = "launcher-ambiguous"
	maxVolumeNameBytes        = 200
	reasonHotplugRefusedEvent = "HotplugRefused"
)

// Refusal is a decision not to touch a volume or a launcher because
// something does not belong to this VMI or is unsafe. It is reported as a
// Warning Event and never causes a detach.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// ValidateVolumeName refuses names that are unsafe as a file name in the
// launcher's hotplug-disks directory. The engine checks again.
func ValidateVolumeName(name string) error {
	switch {
	case name == "":
		return &Refusal{RefusedUnsafeName, "volume name is empty"}
	case name == "." || name == "..":
		return &Refusal{RefusedUnsafeName, fmt.Sprintf("volume name %q is a directory reference", name)}
	case strings.ContainsRune(name, '/'):
		return &Refusal{RefusedUnsafeName, fmt.Sprintf("volume name %q contains a slash", name)}
	case strings.ContainsRune(name, 0):
		return &Refusal{RefusedUnsafeName, fmt.Sprintf("volume name %q contains a NUL byte", name)}
	case len(name) > maxVolumeNameBytes:
		return &Refusal{RefusedUnsafeName, fmt.Sprintf("volume name of %d bytes is longer than %d", len(name), maxVolumeNameBytes)}
	}
	return nil
}

// podLookup finds pods of this node's synced cache by UID.
type podLookup interface {
	PodByUID(uid types.UID) (*corev1.Pod, bool)
}

// findLauncher picks the VMI's virt-launcher pod on this node. It returns
// (nil, nil) when no active pod of the VMI is on this node in the cache,
// and a Refusal when an active pod claimed for this node fails a check.
func findLauncher(vmi *VMI, node string, pods podLookup) (*corev1.Pod, error) {
	var candidates []*corev1.Pod
	var refusal error
	uids := make([]string, 0, len(vmi.Status.ActivePods))
	for uid, n := range vmi.Status.ActivePods {
		if n == node {
			uids = append(uids, string(uid))
		}
	}
	sort.Strings(uids)
	for _, uid := range uids {
		pod, ok := pods.PodByUID(types.UID(uid))
		if !ok || podTerminated(pod) {
			continue
		}
		if err := checkLauncher(vmi, node, pod); err != nil {
			refusal = err
			continue
		}
		candidates = append(candidates, pod)
	}
	switch len(candidates) {
	case 0:
		if refusal == nil && len(uids) == 0 && len(vmi.Status.ActivePods) > 0 {
			// The VMI is labelled for this node but all its launchers run
			// elsewhere: nothing here may be mounted for it.
			refusal = &Refusal{RefusedLauncherNode, fmt.Sprintf("no active virt-launcher pod of the VMI runs on node %q (active pods on %s)",
				node, strings.Join(activePodNodes(vmi), ", "))}
		}
		return nil, refusal
	case 1:
		return candidates[0], nil
	}
	// Two live launchers of one VMI on one node are not something KubeVirt
	// makes; mounting into either could hand the disk to the wrong process.
	return nil, &Refusal{RefusedLauncherAmbiguous, fmt.Sprintf("%d virt-launcher pods of the VMI on node %q", len(candidates), node)}
}

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

func checkLauncher(vmi *VMI, node string, pod *corev1.Pod) error {
	if pod.Spec.NodeName != node {
		return &Refusal{RefusedLauncherNode, fmt.Sprintf("virt-launcher pod %s/%s runs on node %q, not %q", pod.Namespace, pod.Name, pod.Spec.NodeName, node)}
	}
	if pod.Namespace != vmi.Namespace {
		return &Refusal{RefusedLauncherNamespace, fmt.Sprintf("virt-launcher pod %s/%s is not in the VMI's namespace %q", pod.Namespace, pod.Name, vmi.Namespace)}
	}
	if pod.Labels[LabelApp] != AppVirtLauncher || pod.Labels[LabelCreatedBy] != string(vmi.UID) {
		return &Refusal{RefusedLauncherLabels, fmt.Sprintf("pod %s/%s is not labelled %s=%s, %s=%s", pod.Namespace, pod.Name, LabelApp, AppVirtLauncher, LabelCreatedBy, vmi.UID)}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == HotplugDisksVolume && v.EmptyDir != nil {
			return nil
		}
	}
	return &Refusal{RefusedLauncherNoHotplug, fmt.Sprintf("virt-launcher pod %s/%s has no emptyDir volume %q", pod.Namespace, pod.Name, HotplugDisksVolume)}
}

// errAttachPodMissing means the attachment pod is not (yet, or no longer)
// in the node's pod cache: nothing to attach from, nothing to refuse.
var errAttachPodMissing = errors.New("attachment pod is not in this node's pod cache")

// verifyAttachmentPod checks that the attachment pod belongs to the
// launcher before any of its paths is used.
func verifyAttachmentPod(launcher *corev1.Pod, uid types.UID, pods podLookup) (*corev1.Pod, error) {
	pod, ok := pods.PodByUID(uid)
	if !ok {
		return nil, errAttachPodMissing
	}
	if pod.Namespace != launcher.Namespace {
		return nil, &Refusal{RefusedAttachNamespace, fmt.Sprintf("attachment pod %s/%s is not in the launcher's namespace %q", pod.Namespace, pod.Name, launcher.Namespace)}
	}
	if pod.Labels[LabelApp] != AppHotplugDisk {
		return nil, &Refusal{RefusedAttachLabel, fmt.Sprintf("pod %s/%s is not labelled %s=%s", pod.Namespace, pod.Name, LabelApp, AppHotplugDisk)}
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.UID != launcher.UID {
		return nil, &Refusal{RefusedAttachOwner, fmt.Sprintf("attachment pod %s/%s is not controlled by virt-launcher pod %s (uid %s)", pod.Namespace, pod.Name, launcher.Name, launcher.UID)}
	}
	return pod, nil
}

// volumeIntent is the agent's view of one hotpluggable volume of the VMI.
type volumeIntent struct {
	Desired DesiredVolume
	Claim   string
	// Attachable: the attachment pod is verified and the PV is known, so
	// Attach may be called.
	Attachable bool
	// Refused: the volume is not touched beyond keeping what is mounted.
	Refused *Refusal
	// Pending says why a not-refused volume is not attachable yet.
	Pending string
	// Transient is an API error that should retry the reconcile.
	Transient error
	Status    *VolumeStatus
}

// pvResolver maps a claim to its bound PV name.
type pvResolver func(ctx context.Context, namespace, claim string) (string, error)

// buildIntents computes the intent for every hotpluggable volume of the
// VMI, for the given verified launcher. Volumes without a status entry or
// attachment pod yet are pending; they are still in spec.volumes and so are
// never detached.
func buildIntents(ctx context.Context, vmi *VMI, launcher *corev1.Pod, pods podLookup, resolve pvResolver) []volumeIntent {
	var out []volumeIntent
	for _, v := range vmi.Spec.Volumes {
		claim, ok := v.Hotpluggable()
		if !ok {
			continue
		}
		in := volumeIntent{Claim: claim}
		in.Desired.Name = v.Name
		in.Desired.LauncherUID = launcher.UID
		in.Desired.Mode = Filesystem
		if err := ValidateVolumeName(v.Name); err != nil {
			in.Refused = err.(*Refusal)
			out = append(out, in)
			continue
		}
		st := vmi.Status.VolumeStatusByName(v.Name)
		in.Status = st
		if st != nil {
			info := st.PersistentVolumeClaimInfo
			in.Desired.Mode = info.Mode()
			in.Desired.CapacityBytes = info.CapacityBytes()
			if oh, err := info.Overhead(); err == nil {
				in.Desired.FilesystemOverhead = oh
			}
			if info != nil && info.ClaimName != "" && claim == "" {
				in.Claim = info.ClaimName
			}
		}
		switch {
		case in.Desired.Mode != Filesystem && in.Desired.Mode != Block:
			in.Refused = &Refusal{"unknown-volume-mode", fmt.Sprintf("volume %q has volume mode %q", v.Name, in.Desired.Mode)}
		case st == nil || st.HotplugVolume == nil || st.HotplugVolume.AttachPodUID == "":
			in.Pending = "no attachment pod in status.volumeStatus yet"
		default:
			in.Desired.Source.AttachmentPodUID = st.HotplugVolume.AttachPodUID
			_, err := verifyAttachmentPod(launcher, st.HotplugVolume.AttachPodUID, pods)
			var r *Refusal
			switch {
			case errors.As(err, &r):
				in.Refused = r
			case err != nil:
				in.Pending = err.Error()
			default:
				pv, err := resolve(ctx, vmi.Namespace, in.Claim)
				if err != nil {
					in.Transient = err
					in.Pending = err.Error()
					break
				}
				in.Desired.Source.PVName = pv
				in.Attachable = true
			}
		}
		if in.Refused != nil {
			in.Refused.Message = fmt.Sprintf("volume %q: %s", v.Name, in.Refused.Message)
		}
		out = append(out, in)
	}
	return out
}
