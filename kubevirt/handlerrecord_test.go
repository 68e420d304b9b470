// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestParseHandlerRecord reads virt-handler's record as KubeVirt v1.7.0
// writes it (testdata/handler-record.json, captured from its mounter in
// the peer test), and refuses what virt-handler would not have written.
func TestParseHandlerRecord(t *testing.T) {
	captured, err := os.ReadFile("testdata/handler-record.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{name: "captured", in: string(captured), want: []string{
			"/kubelet/pods/urk-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks/fs.img",
			"/kubelet/pods/urk-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks/ext.img",
			"/kubelet/pods/urk-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks/blk",
			"/kubelet/pods/urk-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks/gone.img"}},
		{name: "emptied", in: `{"mountTargetEntries":[],"usesSafePaths":true}`},
		{name: "null entries", in: `{"mountTargetEntries":null}`},
		{name: "a field of a later version", in: `{"mountTargetEntries":[{"targetFile":"/a","x":1}],"y":2}`, want: []string{"/a"}},
		{name: "not json", in: "mountTargetEntries", err: "decode virt-handler's record"},
		{name: "empty file", in: "", err: "decode virt-handler's record"},
		{name: "entry without target", in: `{"mountTargetEntries":[{}]}`, err: "an entry names no target"},
		{name: "too large", in: `{"mountTargetEntries":[` + strings.Repeat(" ", MaxHandlerRecord) + `]}`, err: "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := ParseHandlerRecord(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(rec.Targets, tc.want) {
				t.Fatalf("ParseHandlerRecord = %q, %v; want %q", rec.Targets, err, tc.want)
			}
		})
	}
}
