// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"context"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The storage side: the Controller also plays the attach/detach controller
// with the CSI external-attacher (storage.k8s.io VolumeAttachments) and
// longhorn-manager (Longhorn Volumes and their ticket-based
// VolumeAttachments, from package crds' CRDs). Shapes follow what those
// write on a real Harvester cluster.

var (
	longhornVolumes     = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "volumes"}
	longhornAttachments = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "volumeattachments"}
)

// LonghornDriver is the CSI driver name of Longhorn.
const LonghornDriver = "driver.longhorn.io"

// CSIAttachment is a storage.k8s.io VolumeAttachment of PV on Node and the
// status the external-attacher reports.
type CSIAttachment struct {
	Name, PV, Node string
	Attached       bool
	// AttachError and DetachError are the status messages; "" for none.
	AttachError, DetachError string
}

// CreateCSIAttachment creates the VolumeAttachment and writes its status
// through the status subresource, as the external-attacher does.
func (c *Controller) CreateCSIAttachment(ctx context.Context, a CSIAttachment) error {
	pv := a.PV
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: a.Name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: LonghornDriver, NodeName: a.Node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
	created, err := c.Kube.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create VolumeAttachment %q: %w", a.Name, err)
	}
	created.Status.Attached = a.Attached
	if a.AttachError != "" {
		created.Status.AttachError = &storagev1.VolumeError{Time: metav1.Now(), Message: a.AttachError}
	}
	if a.DetachError != "" {
		created.Status.DetachError = &storagev1.VolumeError{Time: metav1.Now(), Message: a.DetachError}
	}
	if _, err := c.Kube.StorageV1().VolumeAttachments().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of VolumeAttachment %q: %w", a.Name, err)
	}
	return nil
}

// LonghornTicket is one attachment ticket: who asked (Type, e.g.
// csi-attacher, snapshot-controller), for which node, and whether
// longhorn-manager satisfied it (Message is its Satisfied condition's).
type LonghornTicket struct {
	ID, Type, Node string
	Satisfied      bool
	Message        string
}

// LonghornVolume is a Longhorn volume of PV (named after it, as Longhorn
// names the volumes it provisions) in Namespace, claimed by PVCNamespace/PVC.
type LonghornVolume struct {
	Namespace, PV, PVCNamespace, PVC string
	State, Robustness, Node          string
	Tickets                          []LonghornTicket
}

// CreateLonghornVolume creates the Volume and its VolumeAttachment with
// their status, in the shapes of the reference cluster's objects.
func (c *Controller) CreateLonghornVolume(ctx context.Context, v LonghornVolume) error {
	if err := c.EnsureNamespace(ctx, v.Namespace); err != nil {
		return err
	}
	vol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "longhorn.io/v1beta2", "kind": "Volume",
		"metadata": map[string]any{"name": v.PV, "namespace": v.Namespace, "labels": map[string]any{"longhornvolume": v.PV}},
		"spec": map[string]any{"accessMode": "rwx", "migratable": true, "frontend": "blockdev", "dataEngine": "v1",
			"numberOfReplicas": int64(3), "size": "1073741824", "nodeID": v.Node},
	}}
	status := map[string]any{"state": v.State, "robustness": v.Robustness, "currentNodeID": v.Node, "ownerID": v.Node,
		"currentMigrationNodeID": "", "currentImage": "longhornio/longhorn-engine:v1.9.2",
		"kubernetesStatus": map[string]any{"pvName": v.PV, "pvStatus": "Bound", "namespace": v.PVCNamespace, "pvcName": v.PVC}}
	created, err := c.createWithStatus(ctx, longhornVolumes, vol, status)
	if err != nil {
		return err
	}
	tickets, statuses := map[string]any{}, map[string]any{}
	for _, t := range v.Tickets {
		tickets[t.ID] = map[string]any{"id": t.ID, "type": t.Type, "nodeID": t.Node, "generation": int64(0),
			"parameters": map[string]any{"disableFrontend": "false", "lastAttachedBy": ""}}
		cond := "False"
		if t.Satisfied {
			cond = "True"
		}
		statuses[t.ID] = map[string]any{"id": t.ID, "satisfied": t.Satisfied, "generation": int64(0),
			"conditions": []any{map[string]any{"type": "Satisfied", "status": cond, "reason": "", "message": t.Message,
				"lastProbeTime": "", "lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z")}}}
	}
	att := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "longhorn.io/v1beta2", "kind": "VolumeAttachment",
		"metadata": map[string]any{"name": v.PV, "namespace": v.Namespace, "labels": map[string]any{"longhornvolume": v.PV},
			"ownerReferences": []any{map[string]any{"apiVersion": "longhorn.io/v1beta2", "kind": "Volume", "name": v.PV, "uid": string(created.GetUID())}}},
		"spec": map[string]any{"volume": v.PV, "attachmentTickets": tickets},
	}}
	_, err = c.createWithStatus(ctx, longhornAttachments, att, map[string]any{"attachmentTicketStatuses": statuses})
	return err
}

// createWithStatus creates obj, then writes status through the status
// subresource (the create drops it), as a controller does.
func (c *Controller) createWithStatus(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, status map[string]any) (*unstructured.Unstructured, error) {
	ri := c.Dyn.Resource(gvr).Namespace(obj.GetNamespace())
	created, err := ri.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create %s %s/%s: %w", gvr.Resource, obj.GetNamespace(), obj.GetName(), err)
	}
	created.Object["status"] = status
	updated, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update status of %s %s/%s: %w", gvr.Resource, obj.GetNamespace(), obj.GetName(), err)
	}
	return updated, nil
}
