// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package storage

import (
	"fmt"
	"strings"
)

// Summary is the storage side in a few words: the VolumeAttachment, the
// Longhorn volume and who holds tickets on it, then the problem.
func (st *Side) Summary() string {
	var parts []string
	if va := st.VolumeAttachment; va != nil {
		parts = append(parts, "VolumeAttachment "+va.Name+" "+csiState(va))
	} else {
		parts = append(parts, "no VolumeAttachment on this node")
	}
	for _, e := range st.Elsewhere {
		parts = append(parts, "on node "+e.Node+": "+csiState(&e))
	}
	if lh := st.Longhorn; lh != nil {
		where := lh.CurrentNode
		if lh.CurrentMigrationNode != "" {
			where += "+" + lh.CurrentMigrationNode
		}
		parts = append(parts, fmt.Sprintf("Longhorn %s %s/%s on %s", lh.Name, orDash(lh.State), orDash(lh.Robustness), orDash(where)))
		tickets := make([]string, 0, len(lh.Tickets))
		for _, t := range lh.Tickets {
			word := "waiting"
			if t.Satisfied {
				word = "satisfied"
			}
			tickets = append(tickets, fmt.Sprintf("%s@%s %s", t.Type, t.Node, word))
		}
		if len(tickets) == 0 {
			tickets = []string{"none"}
		}
		parts = append(parts, "tickets: "+strings.Join(tickets, ", "))
	}
	s := strings.Join(parts, "; ")
	if st.Problem != "" {
		s += "; PROBLEM: " + st.Problem
	}
	return s
}

func csiState(va *CSIAttachment) string {
	s := "not attached"
	if va.Attached {
		s = "attached"
	}
	if va.Deleting {
		s += ", detaching"
	}
	if va.AttachError != "" {
		s += ", attach error"
	}
	if va.DetachError != "" {
		s += ", detach error"
	}
	return s
}

// orDash is s, or "-" when s is empty, as diag's table writes an unknown.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
