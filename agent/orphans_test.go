// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/hpmount/hpmount/kubevirt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestSweepOrphans(t *testing.T) {
	terminated := func(p *corev1.Pod) {
		p.UID = "terminated-uid"
		p.Status.Phase = corev1.PodSucceeded
	}
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		launcher types.UID
		detached bool
	}{
		{"launcher pod deleted while the agent was down", nil, "gone-uid", true},
		{"launcher pod terminated", []*corev1.Pod{launcherPod(terminated)}, "terminated-uid", true},
		{"running launcher is never touched", []*corev1.Pod{launcherPod()}, launcherUID, false},
		// Any pod can have an emptyDir named hotplug-disks: while it is
		// cached, only a virt-launcher's is swept.
		{"terminated tenant pod that is not a launcher", []*corev1.Pod{launcherPod(terminated, notLauncher)}, "terminated-uid", false},
		{"running tenant pod that is not a launcher", []*corev1.Pod{launcherPod(notLauncher)}, launcherUID, false},
		{"terminated tenant pod without labels", []*corev1.Pod{launcherPod(terminated, func(p *corev1.Pod) { p.Labels = nil })}, "terminated-uid", false},
		{"terminated launcher of another VMI", []*corev1.Pod{launcherPod(terminated, func(p *corev1.Pod) { p.Labels[kubevirt.LabelCreatedBy] = "other-vmi" })}, "terminated-uid", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAgent(t, nil)
			ta.addPods(t, tt.pods...)
			ta.engine.setObserved(tt.launcher, healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Block))
			if err := ta.sweepOrphans(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := ta.engine.changing()
			want := []string(nil)
			if tt.detached {
				want = []string{"detach " + string(tt.launcher) + " a", "detach " + string(tt.launcher) + " b"}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("changing calls %v, want %v", got, want)
			}
		})
	}
}

// notLauncher makes a pod another tenant's: labelled as some app, not as
// KubeVirt's virt-launcher.
func notLauncher(p *corev1.Pod) {
	p.Labels = map[string]string{kubevirt.LabelApp: "my-db", kubevirt.LabelCreatedBy: p.Labels[kubevirt.LabelCreatedBy]}
}
