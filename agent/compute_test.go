// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
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

// TestRuleRewriteVerifiesBlock (#38): a rewrite of the launcher's device
// rules, reported by the engine (another writer took the block volume's
// rule while its node stayed), makes the VMI's next pass verify its block
// volume at once, not at the resync an hour away; a verify that allowed
// the device again is a DeviceRuleRestored Warning naming the upstream
// issues. A pass without a report verifies nothing.
func TestRuleRewriteVerifiesBlock(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.GrowFilesystems = false; c.ResyncPeriod = time.Hour }, pvc("c1", "pv-1"), pvc("c2", "pv-2"))
	ta.addPods(t, launcherPod(func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kubevirt.ComputeContainer, ContainerID: "containerd://first"}}
	}), attachmentPod())
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}))
	ctx := context.Background()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	ta.events()
	ta.engine.verified = map[string]outcome.Result{"blk": outcome.Created}
	for _, pass := range []struct {
		name      string
		rewritten bool
		want      []string
		event     string
	}{
		{"no report", false, nil, ""},
		{"rules rewritten", true, []string{"attach blk Block attach-uid/pv-2"}, "Warning DeviceRuleRestored"},
		{"after the restore", false, nil, ""},
	} {
		t.Run(pass.name, func(t *testing.T) {
			ta.engine.reset()
			if pass.rewritten {
				ta.rulesRewritten(&mountHolds{}, MountChange{Launchers: []types.UID{launcherUID}}, time.Now())
			}
			if err := ta.reconcile(ctx, testKey); err != nil {
				t.Fatal(err)
			}
			got := slices.DeleteFunc(ta.engine.changing(), func(c string) bool { return strings.HasPrefix(c, "grow ") })
			if !slices.Equal(got, pass.want) {
				t.Fatalf("engine calls %q, want %q", got, pass.want)
			}
			events := strings.Join(ta.events(), "\n")
			if pass.event != "" && (!strings.Contains(events, pass.event) || !strings.Contains(events, "kubevirt#7710")) {
				t.Fatalf("events %q, want %q naming kubevirt#7710", events, pass.event)
			}
			if pass.event == "" && strings.Contains(events, "DeviceRuleRestored") {
				t.Fatalf("events %q without a restore", events)
			}
		})
	}
}
