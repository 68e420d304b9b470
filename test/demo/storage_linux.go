// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/test/simnode"
)

// Ticket IDs as longhorn-manager writes them: the attacher type and a hash.
const (
	demoCSITicket    = "csi-3d3120f43480db87c91a6902d670c35899917c03f9f6f81db7bf26d9d66e45ec"
	demoBackupTicket = "backup-controller-backup-6d1f0c2a9e8b4c7d"
)

// stepStorage plays Longhorn for the data volume: its CRDs, the
// storage.k8s.io VolumeAttachment the external-attacher marked attached,
// the Longhorn Volume attached here and two tickets on it (the pod's
// csi-attacher and a backup running beside it), then shows diag's view of
// them.
func (d *demo) stepStorage(st *walkState) error {
	if err := d.cluster.InstallLonghornCRDs(d.ctx); err != nil {
		return err
	}
	item("installed the CRDs volumes.longhorn.io and volumeattachments.longhorn.io")
	pv := st.data.PV
	if err := d.ctrl.CreateCSIAttachment(d.ctx, simnode.CSIAttachment{Name: "csi-" + pv, PV: pv, Node: nodeName, Attached: true}); err != nil {
		return err
	}
	err := d.ctrl.CreateLonghornVolume(d.ctx, simnode.LonghornVolume{Namespace: "longhorn-system", PV: pv,
		PVCNamespace: vmNamespace, PVC: st.data.Claim, State: "attached", Robustness: "healthy", Node: nodeName,
		Tickets: []simnode.LonghornTicket{
			{ID: demoCSITicket, Type: "csi-attacher", Node: nodeName, Satisfied: true},
			{ID: demoBackupTicket, Type: "backup-controller", Node: nodeName, Satisfied: true},
		}})
	if err != nil {
		return err
	}
	item("created VolumeAttachment csi-%s (attached) and Longhorn volume longhorn-system/%s with its tickets", pv, pv)
	rep, err := d.diagJSON()
	if err != nil {
		return err
	}
	for _, v := range rep.Volumes {
		if v.Volume != st.data.Name {
			continue
		}
		s := v.Storage
		switch {
		case s == nil || s.VolumeAttachment == nil || !s.VolumeAttachment.Attached:
			return fmt.Errorf("diag shows no attached VolumeAttachment for %s: %+v", pv, s)
		case s.Longhorn == nil || s.Longhorn.State != "attached" || s.Longhorn.CurrentNode != nodeName || len(s.Longhorn.Tickets) != 2:
			return fmt.Errorf("diag shows Longhorn volume %s as %+v, want attached on %s with 2 tickets", pv, s.Longhorn, nodeName)
		case s.Problem != "":
			return fmt.Errorf("diag sees a storage problem for %s: %s", pv, s.Problem)
		}
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		sub("hpmount diag -o json: volumes[data].storage")
		block(string(b))
		ok("diag shows the VolumeAttachment attached, the Longhorn volume attached/healthy on %s and who holds tickets on it", nodeName)
		return nil
	}
	return fmt.Errorf("diag does not list volume %s", st.data.Name)
}

// diagJSON runs `hpmount diag -o json` for the demo's VMI.
func (d *demo) diagJSON() (*diag.Report, error) {
	args := d.diagArgs("-o", "json", "-n", vmNamespace, vmName)
	out, err := exec.CommandContext(d.ctx, d.binary, args...).Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, fmt.Errorf("run hpmount diag: %w", err)
	}
	rep := &diag.Report{}
	if err := json.Unmarshal(out, rep); err != nil {
		return nil, fmt.Errorf("hpmount diag -o json: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return rep, nil
}
