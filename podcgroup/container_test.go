// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const ctrID = "3f2a9c0d1e4b5a6978877665544332211aabbccddeeff00112233445566778899"

func TestParseContainerID(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{"containerd://" + ctrID, ctrID, false},
		{"cri-o://" + ctrID, ctrID, false},
		{"docker://abc123", "abc123", false},
		{ctrID, ctrID, false},
		{"", "", true},
		{"containerd://", "", true},
		{"containerd://../../kubepods", "", true},
		{"containerd://a/b", "", true},
		{"containerd://" + strings.Repeat("a", maxContainerIDLen+1), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseContainerID(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("ParseContainerID(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
	if _, err := ParseContainerID(""); !errors.Is(err, ErrNoContainerID) {
		t.Fatalf("empty ID: %v, want ErrNoContainerID", err)
	}
}

func TestFinderContainer(t *testing.T) {
	us := "0a1b2c3d_4e5f"
	tests := []struct {
		name   string
		pod    string
		dirs   []string // below pod
		want   string   // container dir below pod, "" for an error
		notFnd bool
	}{
		{"cgroupfs containerd", "kubepods/burstable/pod0a1b2c3d-4e5f",
			[]string{ctrID, "0000sibling", "pause"}, ctrID, false},
		{"systemd containerd", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice",
			[]string{"cri-containerd-" + ctrID + ".scope", "cri-containerd-0000sibling.scope"}, "cri-containerd-" + ctrID + ".scope", false},
		{"systemd docker", "kubepods.slice/kubepods-pod" + us + ".slice",
			[]string{"docker-" + ctrID + ".scope"}, "docker-" + ctrID + ".scope", false},
		{"systemd cri-o, conmon beside it", "kubepods.slice/kubepods-pod" + us + ".slice",
			[]string{"crio-conmon-" + ctrID + ".scope", "crio-" + ctrID + ".scope"}, "crio-" + ctrID + ".scope", false},
		{"cgroupfs cri-o", "kubepods/pod0a1b2c3d-4e5f",
			[]string{"crio-conmon-" + ctrID, "crio-" + ctrID}, "crio-" + ctrID, false},
		{"not started yet", "kubepods/pod0a1b2c3d-4e5f", []string{"0000sibling"}, "", true},
		{"only deeper, not the pod's child", "kubepods/pod0a1b2c3d-4e5f", []string{"other/" + ctrID}, "", true},
		{"two names for one ID", "kubepods/pod0a1b2c3d-4e5f", []string{ctrID, "crio-" + ctrID}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			pod := filepath.Join(root, tt.pod)
			for _, d := range tt.dirs {
				if err := os.MkdirAll(filepath.Join(pod, d, "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var f Finder
			c, err := f.Container(root, "0a1b2c3d-4e5f", "containerd://"+ctrID)
			if tt.want == "" {
				if err == nil || errors.Is(err, ErrContainerNotFound) != tt.notFnd || !strings.Contains(err.Error(), pod) {
					t.Fatalf("Container = %+v, %v; want an error naming %q (not found: %v)", c, err, pod, tt.notFnd)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(pod, tt.want)
			if c.Dir != dir || c.Pod != pod || c.ID != ctrID || !slices.Equal(c.Descendants, []string{filepath.Join(dir, "sub")}) {
				t.Fatalf("Container = %+v, want dir %q below %q with one descendant", c, dir, pod)
			}
			if got := c.BottomUp(); !slices.Equal(got, []string{filepath.Join(dir, "sub"), dir}) {
				t.Fatalf("BottomUp = %q", got)
			}
		})
	}
}
