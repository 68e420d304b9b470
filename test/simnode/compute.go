// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/kubevirt"
)

// SidecarContainer is a simulated launcher's second container, as
// virt-launcher's guest-console-log: it shares the pod cgroup with compute
// and must never be given a block volume's device.
const SidecarContainer = "guest-console-log"

// ContainerID is the ID the simulated runtime gives a launcher's container
// after restarts restarts, derived from the pod UID so that the API side
// (CreateLauncherPod) and the node side (StartLauncher) agree without
// talking: 64 hex digits, as containerd's.
func ContainerID(podUID, container string, restarts int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", podUID, container, restarts))
	return hex.EncodeToString(sum[:])
}

// containerStatuses is what the kubelet reports for a running launcher
// whose compute container restarted restarts times.
func containerStatuses(podUID string, restarts int) []corev1.ContainerStatus {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	return []corev1.ContainerStatus{
		{Name: kubevirt.ComputeContainer, Image: "virt-launcher", Ready: true, State: running, RestartCount: int32(restarts),
			ContainerID: "containerd://" + ContainerID(podUID, kubevirt.ComputeContainer, restarts)},
		{Name: SidecarContainer, Image: "virt-launcher", Ready: true, State: running,
			ContainerID: "containerd://" + ContainerID(podUID, SidecarContainer, 0)},
	}
}

// SetComputeRestarts writes the launcher's container statuses as the
// kubelet reports them after its compute container restarted restarts
// times (0: as created): the compute container's ID changes with each.
func (c *Controller) SetComputeRestarts(ctx context.Context, pod *corev1.Pod, restarts int) (*corev1.Pod, error) {
	cur, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cur.Status.ContainerStatuses = containerStatuses(string(cur.UID), restarts)
	return c.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
}
