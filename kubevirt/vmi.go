// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// VMIResource is the KubeVirt VirtualMachineInstance resource.
var VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// KubeVirt names hpmount relies on.
const (
	VMIKind               = "VirtualMachineInstance"
	VMIAPIVersion         = "kubevirt.io/v1"
	LabelNodeName         = "kubevirt.io/nodeName"
	LabelApp              = "kubevirt.io"
	LabelCreatedBy        = "kubevirt.io/created-by"
	AppVirtLauncher       = "virt-launcher"
	AppHotplugDisk        = "hotplug-disk"
	PhaseMountedToPod     = "MountedToPod"
	PhaseUnMountedFromPod = "UnMountedFromPod"
	PhaseReady            = "Ready"
	ReasonMountedToPod    = "VolumeMountedToPod"
	ReasonUnMounted       = "VolumeUnMountedFromPod"
	// HotplugDisksMountPath is where virt-launcher's compute container
	// mounts the hotplug-disks emptyDir (HostToContainer) and QEMU opens
	// the volumes.
	HotplugDisksMountPath = "/var/run/kubevirt/hotplug-disks"
)

// VolumeMode is the PVC's volumeMode as KubeVirt reports it in
// status.volumeStatus[].persistentVolumeClaimInfo.volumeMode.
type VolumeMode string

const (
	Filesystem VolumeMode = "Filesystem"
	Block      VolumeMode = "Block"
	// Directory is no PVC volume mode but how a Filesystem-mode PVC of a
	// memory-dump or utility volume is handed to the launcher: its mount
	// root is bound onto the directory hotplug-disks/<volume> (see
	// HotplugVolumes).
	Directory VolumeMode = "Directory"
)

// VMI holds the few fields of a KubeVirt VirtualMachineInstance that
// hpmount reads. Unknown fields are ignored.
type VMI struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VMISpec   `json:"spec,omitempty"`
	Status            VMIStatus `json:"status,omitempty"`
}

// VMISpec is the part of spec hpmount reads.
type VMISpec struct {
	Volumes []Volume `json:"volumes,omitempty"`
	// UtilityVolumes (KubeVirt >= 1.7) are mounted into the launcher
	// only, never into the guest.
	UtilityVolumes []UtilityVolume `json:"utilityVolumes,omitempty"`
}

// Volume is one entry of spec.volumes.
type Volume struct {
	Name                  string                  `json:"name"`
	PersistentVolumeClaim *PVCVolumeSource        `json:"persistentVolumeClaim,omitempty"`
	DataVolume            *DataVolumeVolumeSource `json:"dataVolume,omitempty"`
	// MemoryDump is the PVC virtctl memory-dump hotplugs into the launcher.
	MemoryDump *PVCVolumeSource `json:"memoryDump,omitempty"`
}

// PVCVolumeSource is spec.volumes[].persistentVolumeClaim.
type PVCVolumeSource struct {
	ClaimName    string `json:"claimName"`
	Hotpluggable bool   `json:"hotpluggable,omitempty"`
}

// DataVolumeVolumeSource is spec.volumes[].dataVolume; its PVC has the
// DataVolume's name.
type DataVolumeVolumeSource struct {
	Name         string `json:"name"`
	Hotpluggable bool   `json:"hotpluggable,omitempty"`
}

// VMIStatus is the part of status hpmount reads.
type VMIStatus struct {
	NodeName     string               `json:"nodeName,omitempty"`
	ActivePods   map[types.UID]string `json:"activePods,omitempty"`
	VolumeStatus []VolumeStatus       `json:"volumeStatus,omitempty"`
	// MigrationState is the VMI's last live migration (migration.go).
	MigrationState *MigrationState `json:"migrationState,omitempty"`
}

// VolumeStatus is one entry of status.volumeStatus.
type VolumeStatus struct {
	Name                      string                     `json:"name"`
	Target                    string                     `json:"target,omitempty"`
	Phase                     string                     `json:"phase,omitempty"`
	Reason                    string                     `json:"reason,omitempty"`
	Message                   string                     `json:"message,omitempty"`
	HotplugVolume             *HotplugVolumeStatus       `json:"hotplugVolume,omitempty"`
	PersistentVolumeClaimInfo *PersistentVolumeClaimInfo `json:"persistentVolumeClaimInfo,omitempty"`
	// MemoryDumpVolume is set on a memory-dump volume's entry.
	MemoryDumpVolume *MemoryDumpInfo `json:"memoryDumpVolume,omitempty"`
}

// HotplugVolumeStatus names the attachment pod of a hotplug volume.
type HotplugVolumeStatus struct {
	AttachPodName string    `json:"attachPodName,omitempty"`
	AttachPodUID  types.UID `json:"attachPodUID,omitempty"`
}

// PersistentVolumeClaimInfo is what KubeVirt copied from the PVC.
type PersistentVolumeClaimInfo struct {
	ClaimName  string              `json:"claimName,omitempty"`
	VolumeMode string              `json:"volumeMode,omitempty"`
	Capacity   corev1.ResourceList `json:"capacity,omitempty"`
	Requests   corev1.ResourceList `json:"requests,omitempty"`
	// FilesystemOverhead is a decimal string in KubeVirt, e.g. "0.055".
	FilesystemOverhead string `json:"filesystemOverhead,omitempty"`
}

// DecodeVMI converts an unstructured VMI. It never panics: malformed input
// gives an error naming the object.
func DecodeVMI(u *unstructured.Unstructured) (vmi *VMI, err error) {
	if u == nil {
		return nil, errors.New("decode vmi: nil object")
	}
	name := u.GetNamespace() + "/" + u.GetName()
	defer func() {
		if r := recover(); r != nil {
			vmi, err = nil, fmt.Errorf("decode vmi %q: %v", name, r)
		}
	}()
	out := &VMI{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return nil, fmt.Errorf("decode vmi %q: %w", name, err)
	}
	return out, nil
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
	var n int64
	for _, list := range []corev1.ResourceList{i.Capacity, i.Requests} {
		if q, ok := list[corev1.ResourceStorage]; ok {
			n = max(n, q.Value())
		}
	}
	return n
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
