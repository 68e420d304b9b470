// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hpmount/hpmount/kubevirt"
)

func claimStatus(capacity, requests string) *kubevirt.VolumeStatus {
	info := &kubevirt.PersistentVolumeClaimInfo{}
	if capacity != "" {
		info.Capacity.Storage = new(resource.MustParse(capacity))
	}
	if requests != "" {
		info.Requests.Storage = new(resource.MustParse(requests))
	}
	return &kubevirt.VolumeStatus{Name: "v", PersistentVolumeClaimInfo: info}
}

// TestNotGrownWhy holds the expand-pending rule: only a claim asking for
// more than both its capacity and its device, with the filesystem not
// merely behind its device, is an expansion the node cannot finish.
func TestNotGrownWhy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		st       *kubevirt.VolumeStatus
		device   int64
		fsBehind bool
		want     bool
	}{
		{"request above capacity and device", claimStatus("10Gi", "20Gi"), 10 << 30, false, true},
		{"device grew: the node's part", claimStatus("10Gi", "20Gi"), 20 << 30, false, false},
		{"filesystem behind its device", claimStatus("10Gi", "20Gi"), 10 << 30, true, false},
		{"request equals capacity", claimStatus("10Gi", "10Gi"), 10 << 30, false, false},
		{"within the slack of rounding", claimStatus("10Gi", "10250Mi"), 10 << 30, false, false},
		{"no requests", claimStatus("10Gi", ""), 10 << 30, false, false},
		{"device not measured", claimStatus("10Gi", "20Gi"), 0, false, false},
		{"no status", nil, 10 << 30, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notGrownWhy(tc.st, tc.device, tc.fsBehind)
			if (got != "") != tc.want {
				t.Fatalf("notGrownWhy = %q, want a reason: %v", got, tc.want)
			}
			if tc.want && !strings.Contains(got, "20Gi") {
				t.Errorf("reason %q does not name the request", got)
			}
		})
	}
}

// TestExpandPendingVerdict: the verdict comes after needs-fs-expand and its
// hint names Harvester's resize gate and what to do.
func TestExpandPendingVerdict(t *testing.T) {
	v := &Volume{}
	judge(v, &findings{notGrown: "x"})
	if v.Verdict != ExpandPending || v.Detail != "x" {
		t.Fatalf("verdict %q detail %q", v.Verdict, v.Detail)
	}
	for _, want := range []string{"Harvester", "webhook", "filesystem-mode", "stop the VM", "kubectl describe pvc"} {
		if !strings.Contains(v.Hint, want) {
			t.Errorf("hint %q lacks %q", v.Hint, want)
		}
	}
	v = &Volume{}
	judge(v, &findings{notGrown: "x", needsExpand: true})
	if v.Verdict != NeedsFSExpand {
		t.Errorf("with the filesystem behind: verdict %q, want %q", v.Verdict, NeedsFSExpand)
	}
}
