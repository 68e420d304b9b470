// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package storage

import (
	"context"
	"fmt"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Longhorn's API, as served by longhorn-manager (k8s/pkg/apis/longhorn/v1beta2).
var (
	LonghornGroupVersion    = schema.GroupVersion{Group: "longhorn.io", Version: "v1beta2"}
	LonghornVolumes         = LonghornGroupVersion.WithResource("volumes")
	LonghornAttachments     = LonghornGroupVersion.WithResource("volumeattachments")
	storageAttachmentsGroup = "volumeattachments." + storagev1.GroupName
)

// Source states of Sources.
const (
	SourceRead      = "read"
	SourceAbsent    = "absent"
	SourceForbidden = "forbidden"
	SourceError     = "error"
)

// Sources says which storage-side objects a Collect could read.
type Sources struct {
	// VolumeAttachments is "read", "forbidden" or "error".
	VolumeAttachments string `json:"volumeAttachments"`
	// Longhorn is "read", "absent" (longhorn.io/v1beta2 volumes and
	// volumeattachments not served), "forbidden" or "error".
	Longhorn string `json:"longhorn"`
	// Note is the one line saying what was not read and why; empty when
	// everything present was read.
	Note string `json:"note,omitempty"`
}

// Side is the storage side of one volume's PV.
type Side struct {
	// VolumeAttachment is the storage.k8s.io VolumeAttachment of the PV on
	// this node; nil when there is none (or none could be read).
	VolumeAttachment *CSIAttachment `json:"volumeAttachment,omitempty"`
	// Elsewhere are the PV's VolumeAttachments on other nodes.
	Elsewhere []CSIAttachment `json:"elsewhere,omitempty"`
	// Longhorn is the Longhorn volume of the PV; nil without Longhorn.
	Longhorn *LonghornVolume `json:"longhorn,omitempty"`
	// Problem is a stuck detach, an attach to another node or an attach
	// error, in one sentence; empty when the storage side looks right.
	Problem string `json:"problem,omitempty"`
}

// CSIAttachment is one storage.k8s.io VolumeAttachment.
type CSIAttachment struct {
	Name     string `json:"name"`
	Attacher string `json:"attacher"`
	Node     string `json:"node"`
	Attached bool   `json:"attached"`
	// Deleting is set once the object has a deletionTimestamp: a detach
	// was asked for and has not finished.
	Deleting    bool   `json:"deleting,omitempty"`
	AttachError string `json:"attachError,omitempty"`
	DetachError string `json:"detachError,omitempty"`
}

// LonghornVolume is a Longhorn Volume and its attachment tickets.
type LonghornVolume struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// AccessMode and Migratable are spec.accessMode (rwo, rwx) and
	// spec.migratable: an rwx volume that is not migratable is served over
	// NFS by a share manager and attached to that pod's node.
	AccessMode string `json:"accessMode,omitempty"`
	Migratable bool   `json:"migratable,omitempty"`
	// State (attached, detached, attaching, detaching, creating,
	// deleting), Robustness (healthy, degraded, faulted, unknown) and the
	// nodes are status.state, status.robustness, status.currentNodeID and
	// status.currentMigrationNodeID.
	State                string `json:"state,omitempty"`
	Robustness           string `json:"robustness,omitempty"`
	CurrentNode          string `json:"currentNode,omitempty"`
	CurrentMigrationNode string `json:"currentMigrationNode,omitempty"`
	// Tickets are spec.attachmentTickets of the Longhorn VolumeAttachment
	// with their status, sorted by ID.
	Tickets []Ticket `json:"tickets"`
}

// Ticket is one Longhorn attachment ticket: who asked (Type: csi-attacher,
// snapshot-controller, backup-controller, longhorn-upgrader, ...), for
// which node, and whether Longhorn satisfied it.
type Ticket struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Node string `json:"node"`
	// Satisfied is Longhorn's own rule (IsAttachmentTicketSatisfied): the
	// status says satisfied for the ticket's current generation.
	Satisfied bool `json:"satisfied"`
	// Message is the Satisfied condition's reason and message, when set.
	Message string `json:"message,omitempty"`
}

// View is what the API says about the storage side, read once per run; a
// nil map means that source was not read.
type View struct {
	src Sources
	// csi are the VolumeAttachments by PV name.
	csi map[string][]CSIAttachment
	// longhorn are the Longhorn volumes by PV name.
	longhorn map[string]*LonghornVolume
}

// discoverer is the part of a discovery client Collect asks.
type discoverer interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Collect lists the VolumeAttachments and, when served, Longhorn's
// volumes and attachments: one list each, whatever the number of volumes,
// each with opts (the caller says at which revision it reads).
func Collect(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, opts metav1.ListOptions) *View {
	sv := &View{}
	list, err := kube.StorageV1().VolumeAttachments().List(ctx, opts)
	sv.src.VolumeAttachments = sourceState(err)
	if err == nil {
		sv.csi = csiByPV(list.Items)
	}
	lhErr := longhornServed(kube.Discovery())
	if lhErr == nil {
		sv.longhorn, lhErr = listLonghorn(ctx, dyn, opts)
	}
	sv.src.Longhorn = sourceState(lhErr)
	sv.src.Note = sourcesNote(sv.src, err, lhErr)
	return sv
}

// longhornServed returns nil when both Longhorn resources are served, a
// NotFound error when they are not.
func longhornServed(d discoverer) error {
	res, err := d.ServerResourcesForGroupVersion(LonghornGroupVersion.String())
	if err != nil {
		return err
	}
	for _, want := range []string{LonghornVolumes.Resource, LonghornAttachments.Resource} {
		found := false
		for _, r := range res.APIResources {
			found = found || r.Name == want
		}
		if !found {
			return apierrors.NewNotFound(LonghornGroupVersion.WithResource(want).GroupResource(), "")
		}
	}
	return nil
}

func sourceState(err error) string {
	switch {
	case err == nil:
		return SourceRead
	case apierrors.IsNotFound(err):
		return SourceAbsent
	case apierrors.IsForbidden(err):
		return SourceForbidden
	}
	return SourceError
}

// sourcesNote is the one line about what was not read, with the errors of
// the VolumeAttachment list and of Longhorn for an "error" state.
func sourcesNote(s Sources, vaErr, lhErr error) string {
	var parts []string
	switch s.VolumeAttachments {
	case SourceForbidden:
		parts = append(parts, "list "+storageAttachmentsGroup+" is forbidden")
	case SourceError:
		parts = append(parts, fmt.Sprintf("%s could not be listed: %v", storageAttachmentsGroup, vaErr))
	}
	switch s.Longhorn {
	case SourceAbsent:
		parts = append(parts, "Longhorn is not installed (volumes.longhorn.io, volumeattachments.longhorn.io not served)")
	case SourceForbidden:
		parts = append(parts, "list volumes.longhorn.io and volumeattachments.longhorn.io is forbidden")
	case SourceError:
		parts = append(parts, fmt.Sprintf("Longhorn could not be read: %v", lhErr))
	}
	if len(parts) == 0 {
		return ""
	}
	note := strings.Join(parts, "; ")
	if s.VolumeAttachments == SourceForbidden || s.Longhorn == SourceForbidden {
		note += " (the optional ClusterRole of deploy/storage-view grants the reads)"
	}
	return note
}

func csiByPV(items []storagev1.VolumeAttachment) map[string][]CSIAttachment {
	out := map[string][]CSIAttachment{}
	for i := range items {
		va := &items[i]
		pv := va.Spec.Source.PersistentVolumeName
		if pv == nil || *pv == "" {
			continue
		}
		a := CSIAttachment{Name: va.Name, Attacher: va.Spec.Attacher, Node: va.Spec.NodeName,
			Attached: va.Status.Attached, Deleting: va.DeletionTimestamp != nil}
		if e := va.Status.AttachError; e != nil {
			a.AttachError = e.Message
		}
		if e := va.Status.DetachError; e != nil {
			a.DetachError = e.Message
		}
		out[*pv] = append(out[*pv], a)
	}
	return out
}

// Sources says which storage-side objects were read; the zero Sources for
// a nil View.
func (sv *View) Sources() Sources {
	if sv == nil {
		return Sources{}
	}
	return sv.src
}

// Of is the storage side of pv as seen from node; nil when nothing is
// known about it.
func (sv *View) Of(pv, node string) *Side {
	if sv == nil || pv == "" {
		return nil
	}
	st := &Side{Longhorn: sv.longhorn[pv]}
	for _, a := range sv.csi[pv] {
		if a.Node == node && st.VolumeAttachment == nil {
			st.VolumeAttachment = &a
		} else {
			st.Elsewhere = append(st.Elsewhere, a)
		}
	}
	if st.VolumeAttachment == nil && st.Elsewhere == nil && st.Longhorn == nil {
		return nil
	}
	st.Problem = problem(st, node)
	return st
}

// decodeInto converts an unstructured object into one of the types above
// that name only the fields diag reads; a malformed object is an error,
// never a panic.
func decodeInto(u *unstructured.Unstructured, out any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode %s %q: %v", u.GetKind(), u.GetNamespace()+"/"+u.GetName(), r)
		}
	}()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return fmt.Errorf("decode %s %q: %w", u.GetKind(), u.GetNamespace()+"/"+u.GetName(), err)
	}
	return nil
}
