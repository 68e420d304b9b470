// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
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
	// MigrationState is the VMI's last live migration (MigrationOf reads it).
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
	ClaimName  string         `json:"claimName,omitempty"`
	VolumeMode string         `json:"volumeMode,omitempty"`
	Capacity   ClaimResources `json:"capacity,omitzero"`
	Requests   ClaimResources `json:"requests,omitzero"`
	// FilesystemOverhead is a decimal string in KubeVirt, e.g. "0.055".
	FilesystemOverhead string `json:"filesystemOverhead,omitempty"`
}

// ClaimResources is the storage entry of a claim's capacity or requests,
// a ResourceList in KubeVirt: the only entry hpmount reads. A field, not a
// map, because each VMI cached on a node holds two per volume.
type ClaimResources struct {
	Storage *resource.Quantity `json:"storage,omitempty"`
}

// StorageBytes is the storage size in bytes, 0 when unknown.
func (r ClaimResources) StorageBytes() int64 {
	if r.Storage == nil {
		return 0
	}
	return r.Storage.Value()
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

// MigrationState is the part of status.migrationState hpmount reads.
// virt-controller writes it at the handoff, when the target launcher is
// ready; virt-handler marks the end (completed, failed, abortStatus).
type MigrationState struct {
	MigrationUID types.UID `json:"migrationUid,omitempty"`
	SourceNode   string    `json:"sourceNode,omitempty"`
	SourcePod    string    `json:"sourcePod,omitempty"`
	TargetNode   string    `json:"targetNode,omitempty"`
	TargetPod    string    `json:"targetPod,omitempty"`
	// TargetAttachmentPodUID is the attachment pod made for the target
	// launcher, carrying every hotplug volume; set when the VMI has any.
	TargetAttachmentPodUID types.UID `json:"targetAttachmentPodUID,omitempty"`
	Completed              bool      `json:"completed,omitempty"`
	Failed                 bool      `json:"failed,omitempty"`
	AbortRequested         bool      `json:"abortRequested,omitempty"`
	AbortStatus            string    `json:"abortStatus,omitempty"`
}
