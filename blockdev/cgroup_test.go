// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"os"
	"path/filepath"
	"testing"
)

const (
	testUID   = "0c4f6d2e-8a1b-4c3d-9e5f-7a6b5c4d3e2f"
	testCtrID = "0123456789abcdef"
)

// testCtr is the compute container of the test pod, as its pod status
// names it.
var testCtr = Container{PodUID: testUID, ID: "containerd://" + testCtrID}

func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewDeviceRules(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "devices", "unified")
	for _, f := range []string{"devices/devices.list", "unified/cgroup.controllers"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		mode CgroupMode
		root string
		want string // "v1:<root>", "v2:<root>" or "" for an error
	}{
		{CgroupAuto, root, "v1:" + filepath.Join(root, "devices")},
		{CgroupAuto, filepath.Join(root, "unified"), "v2:" + filepath.Join(root, "unified")},
		{CgroupV1, root, "v1:" + filepath.Join(root, "devices")},
		{CgroupV1, filepath.Join(root, "devices"), "v1:" + filepath.Join(root, "devices")},
		{CgroupV2, root, "v2:" + filepath.Join(root, "unified")},
		{CgroupV2, filepath.Join(root, "devices"), ""},
		{CgroupAuto, filepath.Join(root, "devices"), ""},
		{"v3", root, ""},
		{CgroupAuto, "", ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode)+" "+tt.root, func(t *testing.T) {
			r, err := NewDeviceRules(tt.mode, tt.root)
			var got string
			switch r := r.(type) {
			case *V1:
				got = "v1:" + r.Root()
			case *V2:
				got = "v2:" + r.Root()
			}
			if got != tt.want || (err == nil) != (tt.want != "") {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
