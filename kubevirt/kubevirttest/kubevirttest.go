// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubevirttest builds KubeVirt objects for unit tests: a VMI
// default/vm1 on node1 with its launcher pod and attachment pod, each
// changeable by the test. It exists so that the agent, kubevirt and diag
// tests judge the very same objects.
package kubevirttest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// The fixture's names.
const (
	Namespace   = "default"
	VMIName     = "vm1"
	Key         = Namespace + "/" + VMIName
	Node        = "node1"
	VMIUID      = types.UID("vmi-uid")
	LauncherUID = types.UID("launcher-uid")
	AttachUID   = types.UID("attach-uid")
	OtherPodUID = types.UID("other-uid")
	Capacity    = "10Gi"
)

// Launcher is the VMI's virt-launcher pod on Node, changed by mut.
func Launcher(mut ...func(*corev1.Pod)) *corev1.Pod {
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace, Name: "virt-launcher-vm1-abcde", UID: LauncherUID,
			Labels: map[string]string{kubevirt.LabelApp: kubevirt.AppVirtLauncher, kubevirt.LabelCreatedBy: string(VMIUID)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kubevirt.VMIAPIVersion, Kind: kubevirt.VMIKind, Name: VMIName, UID: VMIUID, Controller: &ctrl,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: Node,
			Volumes: []corev1.Volume{{
				Name: kubelet.HotplugDisksVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// AttachmentPod is the launcher's attachment pod, changed by mut.
func AttachmentPod(mut ...func(*corev1.Pod)) *corev1.Pod {
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace, Name: "hp-volume-xyz12", UID: AttachUID,
			Labels: map[string]string{kubevirt.LabelApp: kubevirt.AppHotplugDisk},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: "virt-launcher-vm1-abcde", UID: LauncherUID, Controller: &ctrl,
			}},
		},
		Spec: corev1.PodSpec{NodeName: Node},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// Vol describes one volume of a VMI fixture.
type Vol struct {
	Name, Claim string
	DataVolume  bool
	NotHotplug  bool
	NoStatus    bool
	AttachUID   types.UID
	Mode        string
	Capacity    string
	Phase       string
	// MemoryDump makes a spec memoryDump volume whose status carries
	// memoryDumpVolume; Utility puts the volume in spec.utilityVolumes.
	MemoryDump, Utility bool
}

// VMIObject is the VMI with vols, as the API serves it.
func VMIObject(vols ...Vol) *unstructured.Unstructured {
	var specVols, utility, statuses []any
	for _, v := range vols {
		if v.Utility {
			utility = append(utility, map[string]any{"name": v.Name, "claimName": v.Claim, "type": "Backup"})
		} else {
			specVols = append(specVols, specVolume(v))
		}
		if !v.NoStatus {
			statuses = append(statuses, volumeStatus(v))
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kubevirt.VMIAPIVersion,
		"kind":       kubevirt.VMIKind,
		"metadata": map[string]any{
			"namespace": Namespace, "name": VMIName, "uid": string(VMIUID), "resourceVersion": "1",
			"labels": map[string]any{kubevirt.LabelNodeName: Node},
		},
		"spec": map[string]any{"volumes": specVols, "utilityVolumes": utility},
		"status": map[string]any{
			"nodeName":     Node,
			"activePods":   map[string]any{string(LauncherUID): Node},
			"volumeStatus": statuses,
		},
	}}
}

func specVolume(v Vol) map[string]any {
	src := map[string]any{"hotpluggable": !v.NotHotplug}
	sv := map[string]any{"name": v.Name}
	switch {
	case v.DataVolume:
		src["name"] = v.Claim
		sv["dataVolume"] = src
	case v.MemoryDump:
		src["claimName"] = v.Claim
		sv["memoryDump"] = src
	default:
		src["claimName"] = v.Claim
		sv["persistentVolumeClaim"] = src
	}
	return sv
}

func volumeStatus(v Vol) map[string]any {
	capacity := v.Capacity
	if capacity == "" {
		capacity = Capacity
	}
	info := map[string]any{
		"claimName":          v.Claim,
		"capacity":           map[string]any{"storage": capacity},
		"requests":           map[string]any{"storage": capacity},
		"filesystemOverhead": "0.055",
	}
	if v.Mode != "" {
		info["volumeMode"] = v.Mode
	}
	st := map[string]any{
		"name": v.Name, "target": "", "phase": "AttachedToNode",
		"persistentVolumeClaimInfo": info,
	}
	if v.Phase != "" {
		st["phase"] = v.Phase
	}
	if v.AttachUID != "" {
		st["hotplugVolume"] = map[string]any{"attachPodName": "hp-volume-xyz12", "attachPodUID": string(v.AttachUID)}
	}
	if v.MemoryDump {
		st["memoryDumpVolume"] = map[string]any{"claimName": v.Claim}
	}
	return st
}

// PVC is claim name bound to PV pv in the fixture's namespace.
func PVC(name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv},
	}
}

// Decode decodes u, panicking on failure: fixtures are well-formed.
func Decode(u *unstructured.Unstructured) *kubevirt.VMI {
	vmi, err := kubevirt.DecodeVMI(u)
	if err != nil {
		panic(err)
	}
	return vmi
}
