// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hpmount/hpmount/kubevirt"
)

// The informers' transforms: a node caches every pod on it and every VMI
// scheduled to it, and keeps only what the agent reads. A launcher pod's
// spec (containers, environment, affinity) and a VMI's spec.domain are
// most of each object; managedFields are never read. A VMI is cached
// decoded (vmirecord.go). Whatever is not recognised passes through
// unchanged (tombstones, say).

// TrimPod keeps a pod's identity, labels, owners and deletion, its node
// and volume names (with whether each is an emptyDir), its phase, whether
// each container has terminated, and the ID of a launcher's compute
// container (its device rules go to that container's cgroup); its
// creationTimestamp and, of an attachment pod, when it turned Ready: the
// attach phases are timed by them (summarize_latency.go).
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
			CreationTimestamp: p.CreationTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	if p.Labels[kubevirt.LabelApp] == kubevirt.AppHotplugDisk {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
			}
		}
	}
	for _, v := range p.Spec.Volumes {
		kept := corev1.Volume{Name: v.Name}
		if v.EmptyDir != nil {
			kept.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
		out.Spec.Volumes = append(out.Spec.Volumes, kept)
	}
	for _, cs := range p.Status.ContainerStatuses {
		kept := corev1.ContainerStatus{Name: cs.Name}
		if cs.Name == kubevirt.ComputeContainer {
			kept.ContainerID = cs.ContainerID
		}
		if cs.State.Terminated != nil {
			kept.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: cs.State.Terminated.ExitCode}
		}
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, kept)
	}
	return out, nil
}

// vmiFields are the parts of a VMI the agent reads (kubevirt.VMI) or
// patches (status.volumeStatus, guarded by a test of its current value).
var vmiFields = [][]string{
	{"spec", "volumes"},
	{"spec", "utilityVolumes"},
	{"status", "nodeName"},
	{"status", "phase"},
	{"status", "activePods"},
	{"status", "volumeStatus"},
	{"status", "migrationState"},
}

// trimVMI returns a VMI with only its identity, labels and the fields of
// vmiFields, sharing their values with u: the decoder then never walks
// managedFields, annotations or spec.domain. A shape it does not know is
// returned whole.
func trimVMI(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	out.SetLabels(u.GetLabels())
	if ts := u.GetDeletionTimestamp(); ts != nil {
		out.SetDeletionTimestamp(ts)
	}
	for _, path := range vmiFields {
		v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
		switch {
		case err != nil:
			return u // a shape we do not know: the decoder names it
		case found:
			setShared(out.Object, v, path)
		}
	}
	return out
}

// setShared puts v at path in obj without copying it: the trimmed VMI
// lives only until it is decoded, and the decoder only reads.
func setShared(obj map[string]any, v any, path []string) {
	m := obj
	for _, f := range path[:len(path)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[f] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}
