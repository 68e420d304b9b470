// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"strings"
	"testing"
	"time"
)

func TestReadCalls(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      []Call
		wantErr   string
	}{
		{name: "empty"},
		{
			name: "stage and expand, blank lines skipped",
			log: `{"time":"2026-01-02T03:04:05Z","method":"NodeStageVolume","volume_id":"pv-a","staging_target_path":"/s","access":"fs","fs_type":"xfs"}

{"time":"2026-01-02T03:04:06Z","method":"NodeExpandVolume","volume_id":"pv-a","volume_path":"/t","required_bytes":1048576,"error":"rpc error: code = OutOfRange"}
`,
			want: []Call{
				{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Method: "NodeStageVolume", VolumeID: "pv-a", StagingTargetPath: "/s", Access: AccessFilesystem, FSType: "xfs"},
				{Time: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), Method: "NodeExpandVolume", VolumeID: "pv-a", VolumePath: "/t", RequiredBytes: 1 << 20, Error: "rpc error: code = OutOfRange"},
			},
		},
		{name: "a torn line", log: "{\"method\":\"NodePublishVolume\"}\n{\"method\":", wantErr: "call log line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadCalls(strings.NewReader(tc.log))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadCalls error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ReadCalls = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("call %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestCSIDriver(t *testing.T) {
	d := CSIDriver()
	if d.Name != DriverName || d.Spec.AttachRequired == nil || *d.Spec.AttachRequired ||
		d.Spec.PodInfoOnMount == nil || *d.Spec.PodInfoOnMount || len(d.Spec.VolumeLifecycleModes) != 1 {
		t.Fatalf("CSIDriver() = %+v", d)
	}
}
