// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package storage

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// The Longhorn fields diag reads, named as in longhorn-manager's
// k8s/pkg/apis/longhorn/v1beta2 (volume.go, volumeattachment.go); the
// Longhorn Go modules are not used.

type lhVolume struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		AccessMode string `json:"accessMode"`
		Migratable bool   `json:"migratable"`
	} `json:"spec"`
	Status struct {
		State                  string `json:"state"`
		Robustness             string `json:"robustness"`
		CurrentNodeID          string `json:"currentNodeID"`
		CurrentMigrationNodeID string `json:"currentMigrationNodeID"`
		KubernetesStatus       struct {
			PVName string `json:"pvName"`
		} `json:"kubernetesStatus"`
	} `json:"status"`
}

type lhAttachment struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Volume            string               `json:"volume"`
		AttachmentTickets map[string]*lhTicket `json:"attachmentTickets"`
	} `json:"spec"`
	Status struct {
		AttachmentTicketStatuses map[string]*lhTicketStatus `json:"attachmentTicketStatuses"`
	} `json:"status"`
}

type lhTicket struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	NodeID     string `json:"nodeID"`
	Generation int64  `json:"generation"`
}

type lhTicketStatus struct {
	Satisfied  bool          `json:"satisfied"`
	Generation int64         `json:"generation"`
	Conditions []lhCondition `json:"conditions"`
}

type lhCondition struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// rwxShared is Longhorn's access mode of a volume served to its pods over
// NFS by a share manager: it is attached to the share manager's node, not
// to the pods', and its csi-attacher tickets are not what attaches it.
const rwxShared = "rwx"

// listLonghorn reads every Longhorn volume and attachment once and returns
// the volumes by PV name.
func listLonghorn(ctx context.Context, dyn dynamic.Interface, opts metav1.ListOptions) (map[string]*LonghornVolume, error) {
	vols, err := dyn.Resource(LonghornVolumes).Namespace(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", LonghornVolumes.GroupResource(), err)
	}
	atts, err := dyn.Resource(LonghornAttachments).Namespace(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", LonghornAttachments.GroupResource(), err)
	}
	tickets := map[string][]Ticket{}
	for i := range atts.Items {
		var a lhAttachment
		if err := decodeInto(&atts.Items[i], &a); err != nil {
			return nil, err
		}
		tickets[a.Namespace+"/"+a.Spec.Volume] = ticketsOf(&a)
	}
	out := map[string]*LonghornVolume{}
	for i := range vols.Items {
		var v lhVolume
		if err := decodeInto(&vols.Items[i], &v); err != nil {
			return nil, err
		}
		// Longhorn names a volume it provisions after the PV; the PV of
		// an imported one is in kubernetesStatus.
		pv := v.Status.KubernetesStatus.PVName
		if pv == "" {
			pv = v.Name
		}
		out[pv] = &LonghornVolume{Namespace: v.Namespace, Name: v.Name, AccessMode: v.Spec.AccessMode,
			Migratable: v.Spec.Migratable, State: v.Status.State, Robustness: v.Status.Robustness,
			CurrentNode: v.Status.CurrentNodeID, CurrentMigrationNode: v.Status.CurrentMigrationNodeID,
			Tickets: tickets[v.Namespace+"/"+v.Name]}
		if out[pv].Tickets == nil {
			out[pv].Tickets = []Ticket{}
		}
	}
	return out, nil
}

// ticketsOf pairs each ticket with its status. Satisfied follows
// longhorn-manager's IsAttachmentTicketSatisfied: a status for the ticket's
// own generation that says satisfied.
func ticketsOf(a *lhAttachment) []Ticket {
	out := make([]Ticket, 0, len(a.Spec.AttachmentTickets))
	for key, t := range a.Spec.AttachmentTickets {
		if t == nil {
			continue
		}
		tk := Ticket{ID: t.ID, Type: t.Type, Node: t.NodeID}
		if tk.ID == "" {
			tk.ID = key
		}
		if s := a.Status.AttachmentTicketStatuses[key]; s != nil {
			tk.Satisfied = s.Satisfied && s.Generation == t.Generation
			tk.Message = satisfiedMessage(s.Conditions)
			if s.Satisfied && !tk.Satisfied {
				why := fmt.Sprintf("status is for generation %d, the ticket is at %d", s.Generation, t.Generation)
				if tk.Message != "" {
					why = tk.Message + "; " + why
				}
				tk.Message = why
			}
		}
		out = append(out, tk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func satisfiedMessage(conds []lhCondition) string {
	for _, c := range conds {
		if c.Type != "Satisfied" {
			continue
		}
		if c.Reason == "" || c.Message == "" {
			return c.Reason + c.Message
		}
		return c.Reason + ": " + c.Message
	}
	return ""
}

// longhornProblem says what keeps the Longhorn volume from being attached
// to node, or "" when nothing does.
func longhornProblem(lh *LonghornVolume, node string) []string {
	var out []string
	var waiting, holders []Ticket
	for _, t := range lh.Tickets {
		switch {
		case t.Node == node && !t.Satisfied:
			waiting = append(waiting, t)
		case t.Node != node && t.Satisfied:
			holders = append(holders, t)
		}
	}
	name := lh.Namespace + "/" + lh.Name
	here := lh.CurrentNode == node || lh.CurrentMigrationNode == node
	shared := lh.AccessMode == rwxShared && !lh.Migratable
	switch {
	case lh.State == "attached" && !here && !shared && lh.CurrentNode != "":
		s := fmt.Sprintf("Longhorn volume %s is attached to node %s, not this node", name, lh.CurrentNode)
		if len(holders) > 0 {
			s += ", held there by " + ticketList(holders)
		}
		out = append(out, s)
		if len(waiting) > 0 {
			out = append(out, "waiting: "+ticketList(waiting))
		}
	case len(waiting) > 0:
		s := "not satisfied: " + ticketList(waiting)
		if len(holders) > 0 {
			s += "; the volume is held elsewhere by " + ticketList(holders)
		}
		out = append(out, fmt.Sprintf("Longhorn volume %s (%s): %s", name, lh.State, s))
	}
	if lh.Robustness == "faulted" {
		out = append(out, fmt.Sprintf("Longhorn volume %s is faulted (no healthy replica)", name))
	}
	return out
}

func ticketList(ts []Ticket) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		s := fmt.Sprintf("ticket %s (%s) for node %s", t.ID, t.Type, t.Node)
		if !t.Satisfied && t.Message != "" {
			s += " [" + t.Message + "]"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
