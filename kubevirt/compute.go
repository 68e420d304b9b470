// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import corev1 "k8s.io/api/core/v1"

// ComputeContainer is the virt-launcher container QEMU runs in
// (virt-controller's launcher template). Only it is given a block volume's
// device: the launcher's other containers (guest-console-log, hotplug
// sidecars) never open the volumes.
const ComputeContainer = "compute"

// ComputeContainerID returns the ID the pod status gives the launcher's
// compute container ("containerd://<id>"), or "" while it names none (the
// container has not been created yet). After a restart it names the new
// container, whose cgroup is new and carries no device rule yet.
func ComputeContainerID(launcher *corev1.Pod) string {
	for _, cs := range launcher.Status.ContainerStatuses {
		if cs.Name == ComputeContainer {
			return cs.ContainerID
		}
	}
	return ""
}
