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

const testUID = "0c4f6d2e-8a1b-4c3d-9e5f-7a6b5c4d3e2f"

func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindPodCgroups(t *testing.T) {
	us := strings.ReplaceAll(testUID, "-", "_")
	tests := []struct {
		name     string
		dirs     []string
		wantPod  string
		wantDesc []string
	}{
		{
			name:     "cgroupfs burstable",
			dirs:     []string{"kubepods/burstable/pod" + testUID + "/ctr1", "kubepods/burstable/pod" + testUID + "/ctr2", "kubepods/burstable/podother/ctr"},
			wantPod:  "kubepods/burstable/pod" + testUID,
			wantDesc: []string{"kubepods/burstable/pod" + testUID + "/ctr1", "kubepods/burstable/pod" + testUID + "/ctr2"},
		},
		{
			name:    "cgroupfs guaranteed without containers",
			dirs:    []string{"kubepods/pod" + testUID, "kubepods/besteffort"},
			wantPod: "kubepods/pod" + testUID,
		},
		{
			name:     "systemd besteffort, nested container cgroup",
			dirs:     []string{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/cri-containerd-abc.scope/libvirt"},
			wantPod:  "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice",
			wantDesc: []string{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/cri-containerd-abc.scope", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/cri-containerd-abc.scope/libvirt"},
		},
		{
			name:     "systemd guaranteed under a kubelet cgroup root",
			dirs:     []string{"system.slice/sshd.service", "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + us + ".slice/crio-1.scope"},
			wantPod:  "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + us + ".slice",
			wantDesc: []string{"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + us + ".slice/crio-1.scope"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			mkdirs(t, root, tt.dirs...)
			got, err := Find(root, testUID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Pod != filepath.Join(root, tt.wantPod) {
				t.Errorf("pod %q, want %q", got.Pod, tt.wantPod)
			}
			var want []string
			for _, d := range tt.wantDesc {
				want = append(want, filepath.Join(root, d))
			}
			if !slices.Equal(got.Descendants, want) {
				t.Errorf("descendants %q, want %q", got.Descendants, want)
			}
			if td, bu := got.TopDown(), got.BottomUp(); td[0] != got.Pod || bu[len(bu)-1] != got.Pod || len(td) != len(want)+1 {
				t.Errorf("TopDown %q BottomUp %q", td, bu)
			}
		})
	}
}

func TestFindPodCgroupsRefuses(t *testing.T) {
	tests := []struct {
		name    string
		uid     string
		setup   func(t *testing.T, root string)
		wantErr error
		wantMsg string
	}{
		{
			name:    "not found names root and uid",
			uid:     testUID,
			setup:   func(t *testing.T, root string) { mkdirs(t, root, "kubepods/burstable/podother") },
			wantErr: ErrNotFound,
			wantMsg: testUID,
		},
		{
			name: "symlink to the pod cgroup is not followed",
			uid:  testUID,
			setup: func(t *testing.T, root string) {
				mkdirs(t, root, "elsewhere/ctr", "kubepods")
				if err := os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(root, "kubepods", "pod"+testUID)); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: ErrNotFound,
		},
		{
			name:    "deeper than the search bound",
			uid:     testUID,
			setup:   func(t *testing.T, root string) { mkdirs(t, root, "a/b/c/d/e/f/g/pod"+testUID) },
			wantErr: ErrNotFound,
		},
		{name: "empty uid", uid: "", wantMsg: "pod UID"},
		{name: "path in uid", uid: "../../etc", wantMsg: "only letters"},
		{name: "slash in uid", uid: "a/b", wantMsg: "only letters"},
		{
			name:    "two cgroups for one pod",
			uid:     testUID,
			setup:   func(t *testing.T, root string) { mkdirs(t, root, "kubepods/pod"+testUID, "other/pod"+testUID) },
			wantMsg: "has 2 cgroups",
		},
		{
			name:    "subtree too deep",
			uid:     testUID,
			setup:   func(t *testing.T, root string) { mkdirs(t, root, "kubepods/pod"+testUID+"/1/2/3/4/5/6/7/8/9") },
			wantMsg: "deeper than",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, root)
			}
			_, err := Find(root, tt.uid)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err %v, want %v", err, tt.wantErr)
			}
			if tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err %q does not mention %q", err, tt.wantMsg)
			}
			if errors.Is(err, ErrNotFound) && !strings.Contains(err.Error(), root) {
				t.Errorf("err %q does not name the root %q", err, root)
			}
		})
	}
}
