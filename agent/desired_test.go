// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"

	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"

	"github.com/hpmount/hpmount/kubevirt"
)

func staticPV(_, claim string) (string, error) { return "pv-" + claim, nil }

func TestBuildIntents(t *testing.T) {
	pods := kubevirt.PodMap{launcherUID: launcherPod(), attachUID: attachmentPod()}
	tests := []struct {
		name       string
		vols       []vol
		want       map[string]kubevirt.VolumeMode // attachable volumes and their mode
		pending    []string
		claimOfVol map[string]string
	}{
		{
			name: "hotpluggable pvc, non-hotpluggable ignored",
			vols: []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}, {Name: "root", Claim: "rootc", NotHotplug: true, AttachUID: attachUID}},
			want: map[string]kubevirt.VolumeMode{"hp": kubevirt.Filesystem},
		},
		{
			name:       "data volume uses its name as claim",
			vols:       []vol{{Name: "dv", Claim: "dv-claim", DataVolume: true, AttachUID: attachUID}},
			want:       map[string]kubevirt.VolumeMode{"dv": kubevirt.Filesystem},
			claimOfVol: map[string]string{"dv": "dv-claim"},
		},
		{
			name:    "missing attachPodUID is pending",
			vols:    []vol{{Name: "hp", Claim: "c1"}},
			pending: []string{"hp"},
		},
		{
			name:    "no status entry is pending",
			vols:    []vol{{Name: "hp", Claim: "c1", NoStatus: true}},
			pending: []string{"hp"},
		},
		{
			name: "block mode",
			vols: []vol{{Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}},
			want: map[string]kubevirt.VolumeMode{"blk": kubevirt.Block},
		},
		{
			name:    "attachment pod not in cache is pending",
			vols:    []vol{{Name: "hp", Claim: "c1", AttachUID: "unknown"}},
			pending: []string{"hp"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := kt.Decode(vmiObject(tt.vols...))
			launcher := pods[launcherUID]
			p := kubevirt.Placement{VMI: vmi, Volumes: kubevirt.HotplugVolumes(vmi, launcher, pods)}
			p.Launcher = launcher
			intents := buildIntents(p, staticPV)
			got := map[string]kubevirt.VolumeMode{}
			var pending []string
			for _, in := range intents {
				if in.Refused != nil {
					t.Fatalf("unexpected refusal %v", in.Refused)
				}
				if in.Attachable {
					got[in.Desired.Name] = in.Desired.Mode
					if in.Desired.Source.PVName != "pv-"+in.Claim || in.Desired.LauncherUID != launcherUID || in.Desired.Source.AttachmentPodUID != attachUID {
						t.Fatalf("desired = %+v", in.Desired)
					}
					if in.Desired.CapacityBytes != 10<<30 || in.Desired.FilesystemOverhead != 0.055 {
						t.Fatalf("capacity/overhead = %d/%v", in.Desired.CapacityBytes, in.Desired.FilesystemOverhead)
					}
				} else {
					pending = append(pending, in.Desired.Name)
				}
				if c, ok := tt.claimOfVol[in.Desired.Name]; ok && c != in.Claim {
					t.Fatalf("claim = %q, want %q", in.Claim, c)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("attachable = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("attachable = %v, want %v", got, tt.want)
				}
			}
			if strings.Join(pending, ",") != strings.Join(tt.pending, ",") {
				t.Fatalf("pending = %v, want %v", pending, tt.pending)
			}
		})
	}
}
