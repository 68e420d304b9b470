// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// Refusal reasons: the reason label of hpmount_refusals_total, the reason
// of diag's refused verdict, and the start of every HotplugRefused Event.
const (
	RefusedUnsafeName        = "unsafe-volume-name"
	RefusedUnsafeContent     = "unsafe-content"
	RefusedUnknownMode       = "unknown-volume-mode"
	RefusedAttachNamespace   = "attachment-pod-namespace"
	RefusedAttachLabel       = "attachment-pod-label"
	RefusedAttachOwner       = "attachment-pod-owner"
	RefusedLauncherNode      = "launcher-node"
	RefusedLauncherNamespace = "launcher-namespace"
	RefusedLauncherLabels    = "launcher-labels"
	RefusedLauncherNoHotplug = "launcher-no-hotplug-disks"
	RefusedLauncherAmbiguous = "launcher-ambiguous"
)

// RefusalReasons lists every refusal reason.
var RefusalReasons = []string{
	RefusedUnsafeName, RefusedUnsafeContent, RefusedUnknownMode,
	RefusedAttachNamespace, RefusedAttachLabel, RefusedAttachOwner,
	RefusedLauncherNode, RefusedLauncherNamespace, RefusedLauncherLabels,
	RefusedLauncherNoHotplug, RefusedLauncherAmbiguous,
}

// Refusal is a decision not to touch a volume or a launcher because
// something does not belong to the VMI or is unsafe. The agent reports it
// as a Warning Event and never detaches because of it; diag reports it as
// the refused verdict with the same Reason.
type Refusal struct {
	Reason  string
	Message string
	// Err is the error the refusal was made from, if any.
	Err error
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

func (r *Refusal) Unwrap() error { return r.Err }

func refusef(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// RefusalOf returns the refusal err carries: a *Refusal it wraps, or an
// unsafe-content refusal for an error wrapping isolation.ErrUnsafePath
// (tenant content the node refuses: a disk.img that is a link, a device
// node, a hard link...). Any other error is no refusal: nil.
func RefusalOf(err error) *Refusal {
	var r *Refusal
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, isolation.ErrUnsafePath):
		return &Refusal{Reason: RefusedUnsafeContent, Message: err.Error(), Err: err}
	}
	return nil
}

// CheckVolumeName refuses a volume name that cannot be a file name in the
// launcher's hotplug-disks directory.
func CheckVolumeName(name string) *Refusal {
	if err := kubelet.ValidName(name); err != nil {
		return &Refusal{Reason: RefusedUnsafeName, Message: err.Error(), Err: err}
	}
	return nil
}

// PodLookup finds a pod of this node by UID.
type PodLookup interface {
	PodByUID(uid types.UID) (*corev1.Pod, bool)
}

// PodMap is a PodLookup over a map, for callers that listed pods.
type PodMap map[types.UID]*corev1.Pod

// PodByUID implements PodLookup.
func (m PodMap) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	p, ok := m[uid]
	return p, ok
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
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.UID != launcher.UID {
		return refusef(RefusedAttachOwner, "attachment pod %s/%s is not controlled by virt-launcher pod %s (uid %s)", pod.Namespace, pod.Name, launcher.Name, launcher.UID)
	}
	return nil
}
