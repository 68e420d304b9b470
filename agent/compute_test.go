// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/kubevirt"
)

// TestComputeRestartVerifiesBlock: a block volume's device rule lives in
// the compute container's cgroup, which a restart replaces. The pod update
// that names the new container verifies the block node at once, for the
// new container, without waiting for the periodic resync; an unchanged
// container verifies nothing.
func TestComputeRestartVerifiesBlock(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.GrowFilesystems = false }, pvc("c1", "pv-1"), pvc("c2", "pv-2"))
	withCompute := func(id string) *corev1.Pod {
		return launcherPod(func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kubevirt.ComputeContainer, ContainerID: id}}
		})
	}
	ta.addPods(t, withCompute("containerd://first"), attachmentPod())
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}))
	ctx := context.Background()
	for _, pass := range []struct {
		name, compute string
		want          []string
	}{
		{"attach", "containerd://first", []string{"attach blk Block attach-uid/pv-2", "attach hp Filesystem attach-uid/pv-1"}},
		{"unchanged", "containerd://first", nil},
		{"compute restarted", "containerd://second", []string{"attach blk Block attach-uid/pv-2"}},
		{"after the restart", "containerd://second", nil},
	} {
		t.Run(pass.name, func(t *testing.T) {
			defer ta.engine.reset()
			ta.addPods(t, withCompute(pass.compute))
			if err := ta.reconcile(ctx, testKey); err != nil {
				t.Fatal(err)
			}
			// A block volume's growth check runs on every pass here (no
			// growth ran yet); only attaches and verifies matter.
			got := slices.DeleteFunc(ta.engine.changing(), func(c string) bool { return strings.HasPrefix(c, "grow ") })
			if !slices.Equal(got, pass.want) {
				t.Fatalf("engine calls %q, want %q", got, pass.want)
			}
			if got := ta.engine.compute["blk"]; got != pass.compute {
				t.Fatalf("blk attached for compute container %q, want %q", got, pass.compute)
			}
		})
	}
}
