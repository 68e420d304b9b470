// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestSweepOrphans(t *testing.T) {
	terminated := func(p *corev1.Pod) {
		p.UID = "terminated-uid"
		p.Status.Phase = corev1.PodSucceeded
	}
	both := []string{"a", "b"}
	recordedPod := launcherPod(terminated, func(p *corev1.Pod) { p.UID = "recorded-uid" })
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		launcher types.UID
		detached []string
		// vmi has the launcher's VMI exist in the API server.
		vmi bool
	}{
		{"launcher pod deleted while the agent was down", nil, "gone-uid", both, false},
		{"launcher pod terminated", []*corev1.Pod{launcherPod(terminated)}, "terminated-uid", both, false},
		{"running launcher is never touched", []*corev1.Pod{launcherPod()}, launcherUID, nil, false},
		// The record of the pod's VMI names a: virt-handler's to remove
		// (a failed migration's target, kubevirt#17882) while the pod is
		// there and the VMI exists; nothing is left to a virt-handler that
		// cleaned up after its VMI, or once the pod is gone.
		{"terminated launcher, a target recorded", []*corev1.Pod{recordedPod}, "recorded-uid", []string{"b"}, true},
		{"terminated launcher, a target recorded, its VMI gone", []*corev1.Pod{recordedPod}, "recorded-uid", both, false},
		{"launcher pod deleted, a target recorded", nil, "recorded-uid", both, true},
		// Any pod can have an emptyDir named hotplug-disks: while it is
		// cached, only a virt-launcher's is swept.
		{"terminated tenant pod that is not a launcher", []*corev1.Pod{launcherPod(terminated, notLauncher)}, "terminated-uid", nil, false},
		{"running tenant pod that is not a launcher", []*corev1.Pod{launcherPod(notLauncher)}, launcherUID, nil, false},
		{"terminated tenant pod without labels", []*corev1.Pod{launcherPod(terminated, func(p *corev1.Pod) { p.Labels = nil })}, "terminated-uid", nil, false},
		{"terminated launcher of another VMI", []*corev1.Pod{launcherPod(terminated, func(p *corev1.Pod) { p.Labels[kubevirt.LabelCreatedBy] = "other-vmi" })}, "terminated-uid", both, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAgent(t, nil)
			ta.addPods(t, tt.pods...)
			if tt.vmi {
				_, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Create(context.Background(), vmiObject(), metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			}
			ta.engine.handler = map[types.UID]HandlerRecord{kt.VMIUID: {
				Volumes: map[types.UID]map[string]bool{"recorded-uid": {"a": true, "a.img": true}}}}
			ta.engine.setObserved(tt.launcher, healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Block))
			if err := ta.sweepOrphans(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := ta.engine.changing()
			var want []string
			for _, v := range tt.detached {
				want = append(want, "detach "+string(tt.launcher)+" "+v)
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
