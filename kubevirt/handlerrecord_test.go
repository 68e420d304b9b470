// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
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

// TestRecordedTargetsLeaves judges records against launcher listings: a
// recorded target leaves its volume (and a file target its "v.img" name)
// to virt-handler while every recorded target exists; one gone target
// leaves nothing (kubevirt#16532); a path that is no hotplug target is
// skipped; a listing error is returned.
func TestRecordedTargetsLeaves(t *testing.T) {
	const dir = "/var/lib/kubelet/pods/l1/volumes/kubernetes.io~empty-dir/hotplug-disks/"
	listed := map[types.UID]map[string]bool{"l1": {"fs.img": true, "blk": true}}
	list := func(l types.UID) (map[string]bool, error) {
		if l == "broken" {
			return nil, errors.New("listing failed")
		}
		return listed[l], nil
	}
	for _, tc := range []struct {
		name    string
		targets []string
		leaves  []string // of launcher l1
		keeps   []string // of launcher l1
		stuck   bool
		err     bool
	}{
		{name: "recorded", targets: []string{dir + "fs.img", dir + "blk"}, leaves: []string{"fs", "fs.img", "blk"}, keeps: []string{"other"}},
		{name: "one gone", targets: []string{dir + "fs.img", dir + "gone.img"}, keeps: []string{"fs", "fs.img"}, stuck: true},
		{name: "no hotplug target", targets: []string{"/etc/passwd", dir + "blk"}, leaves: []string{"blk"}},
		{name: "listing fails", targets: []string{"/p/pods/broken/volumes/kubernetes.io~empty-dir/hotplug-disks/x.img"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := HandlerRecord{Targets: tc.targets}.Judge(list)
			if (err != nil) != tc.err {
				t.Fatalf("judge = %v, want error %v", err, tc.err)
			}
			if (r.Stuck != "") != tc.stuck {
				t.Errorf("stuck %q, want stuck %v", r.Stuck, tc.stuck)
			}
			for _, v := range tc.leaves {
				if !r.Leaves("l1", v) {
					t.Errorf("%s not left to virt-handler", v)
				}
			}
			for _, v := range tc.keeps {
				if r.Leaves("l1", v) {
					t.Errorf("%s left to virt-handler", v)
				}
			}
			// Names holds whether or not the record is stuck: it says
			// what virt-handler will look for, not what it can act on.
			if names, want := r.Names("l1"), !tc.err; names != want || r.Names("l2") {
				t.Errorf("names l1 %v (want %v), l2 %v", names, want, r.Names("l2"))
			}
		})
	}
}
