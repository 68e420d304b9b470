// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package storage

import (
	"fmt"
	"strings"
)

// problem is what on the storage side keeps the PV from being
// attached to node, or leaves it attached where it should not be, in one
// sentence; "" when nothing does.
func problem(st *Side, node string) string {
	var out []string
	if st.Longhorn != nil {
		out = append(out, longhornProblem(st.Longhorn, node)...)
	}
	out = append(out, csiProblem(st, node)...)
	return strings.Join(out, "; ")
}

// csiProblem judges the storage.k8s.io VolumeAttachments of the PV: this
// node's, and those of other nodes that are attached or not yet detached.
func csiProblem(st *Side, node string) []string {
	var out []string
	va := st.VolumeAttachment
	if va != nil {
		switch {
		case va.AttachError != "":
			out = append(out, fmt.Sprintf("VolumeAttachment %s: attach to this node failed: %s", va.Name, va.AttachError))
		case va.DetachError != "":
			out = append(out, fmt.Sprintf("VolumeAttachment %s: detach from this node failed: %s", va.Name, va.DetachError))
		case !va.Attached && !va.Deleting:
			out = append(out, fmt.Sprintf("VolumeAttachment %s is not attached to this node yet", va.Name))
		}
	}
	for _, e := range st.Elsewhere {
		switch {
		case e.DetachError != "":
			out = append(out, fmt.Sprintf("detach from node %s is stuck (VolumeAttachment %s): %s", e.Node, e.Name, e.DetachError))
		case e.Deleting && e.Attached:
			out = append(out, fmt.Sprintf("detach from node %s has not finished (VolumeAttachment %s is being deleted, still attached)", e.Node, e.Name))
		case e.Attached && (va == nil || !va.Attached):
			out = append(out, fmt.Sprintf("the PV is attached to node %s (VolumeAttachment %s), not this node", e.Node, e.Name))
		}
	}
	return out
}

// Advice names where to look next about st's problem.
func (st *Side) Advice() string {
	var look []string
	if lh := st.Longhorn; lh != nil {
		look = append(look, fmt.Sprintf("`kubectl -n %s get volumeattachments.longhorn.io %s -o yaml`: a ticket of another node keeps the volume there until its snapshot, backup or upgrade ends or the ticket is removed; longhorn-manager's logs say why a ticket waits", lh.Namespace, lh.Name))
	}
	if st.VolumeAttachment != nil || st.Elsewhere != nil {
		look = append(look, "`kubectl describe volumeattachment` and the CSI external-attacher's logs")
	}
	return strings.Join(look, "; ")
}
