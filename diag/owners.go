package diag

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
)

// These checks mirror the agent's (agent/desired.go, unexported there): the
// launcher is the VMI's active pod on this node, labelled for the VMI, with a
// hotplug-disks emptyDir; the attachment pod is in its namespace, labelled
// kubevirt.io=hotplug-disk and controlled by it. diag reports a failure as a
// refusal, as the agent does.

// refusal is a reason the agent would not touch a volume.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refusef(format string, args ...any) *refusal {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// findLauncher returns the VMI's launcher pod on node; nil without error
// when no active pod of the VMI on this node is known.
func findLauncher(vmi *agent.VMI, node string, pods map[types.UID]*corev1.Pod) (*corev1.Pod, *refusal) {
	var uids []string
	for uid, n := range vmi.Status.ActivePods {
		if n == node {
			uids = append(uids, string(uid))
		}
	}
	sort.Strings(uids)
	var found []*corev1.Pod
	var ref *refusal
	for _, uid := range uids {
		pod, ok := pods[types.UID(uid)]
		if !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if r := checkLauncher(vmi, node, pod); r != nil {
			ref = r
			continue
		}
		found = append(found, pod)
	}
	switch len(found) {
	case 0:
		return nil, ref
	case 1:
		return found[0], nil
	}
	return nil, refusef("%d virt-launcher pods of the VMI on node %q", len(found), node)
}

func checkLauncher(vmi *agent.VMI, node string, pod *corev1.Pod) *refusal {
	switch {
	case pod.Spec.NodeName != node:
		return refusef("virt-launcher pod %s/%s runs on node %q, not %q", pod.Namespace, pod.Name, pod.Spec.NodeName, node)
	case pod.Namespace != vmi.Namespace:
		return refusef("virt-launcher pod %s/%s is not in the VMI's namespace", pod.Namespace, pod.Name)
	case pod.Labels[agent.LabelApp] != agent.AppVirtLauncher || pod.Labels[agent.LabelCreatedBy] != string(vmi.UID):
		return refusef("pod %s/%s is not labelled %s=%s, %s=%s", pod.Namespace, pod.Name,
			agent.LabelApp, agent.AppVirtLauncher, agent.LabelCreatedBy, vmi.UID)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == agent.HotplugDisksVolume && v.EmptyDir != nil {
			return nil
		}
	}
	return refusef("virt-launcher pod %s/%s has no emptyDir volume %q", pod.Namespace, pod.Name, agent.HotplugDisksVolume)
}

// checkAttachmentPod verifies that pod belongs to launcher.
func checkAttachmentPod(launcher, pod *corev1.Pod) *refusal {
	switch {
	case pod.Namespace != launcher.Namespace:
		return refusef("attachment pod %s/%s is not in the launcher's namespace %q", pod.Namespace, pod.Name, launcher.Namespace)
	case pod.Labels[agent.LabelApp] != agent.AppHotplugDisk:
		return refusef("pod %s/%s is not labelled %s=%s", pod.Namespace, pod.Name, agent.LabelApp, agent.AppHotplugDisk)
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.UID != launcher.UID {
		return refusef("attachment pod %s/%s is not controlled by virt-launcher pod %s", pod.Namespace, pod.Name, launcher.Name)
	}
	return nil
}
