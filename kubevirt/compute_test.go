// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

func TestComputeContainerID(t *testing.T) {
	statuses := func(cs ...corev1.ContainerStatus) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.ContainerStatuses = cs }
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"no status yet", kt.Launcher(), ""},
		{"compute among others", kt.Launcher(statuses(
			corev1.ContainerStatus{Name: "guest-console-log", ContainerID: "containerd://aaa"},
			corev1.ContainerStatus{Name: kubevirt.ComputeContainer, ContainerID: "containerd://bbb"},
		)), "containerd://bbb"},
		{"compute not created yet", kt.Launcher(statuses(corev1.ContainerStatus{Name: kubevirt.ComputeContainer})), ""},
		{"only a sidecar", kt.Launcher(statuses(corev1.ContainerStatus{Name: "hotplug-sidecar", ContainerID: "cri-o://ccc"})), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubevirt.ComputeContainerID(tt.pod); got != tt.want {
				t.Fatalf("ComputeContainerID = %q, want %q", got, tt.want)
			}
		})
	}
}
