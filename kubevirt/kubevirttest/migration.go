// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirttest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
)

// The migration fixture's names: vm1 migrates from Node to TargetNode.
const (
	TargetNode        = "node2"
	TargetLauncherUID = types.UID("target-launcher-uid")
	TargetAttachUID   = types.UID("target-attach-uid")
	MigrationUID      = types.UID("migration-uid")
	targetLauncher    = "virt-launcher-vm1-target"
)

// TargetLauncher is the migration's target launcher on TargetNode,
// changed by mut.
func TargetLauncher(mut ...func(*corev1.Pod)) *corev1.Pod {
	p := Launcher(func(p *corev1.Pod) {
		p.Name, p.UID, p.Spec.NodeName = targetLauncher, TargetLauncherUID, TargetNode
		p.Labels = map[string]string{kubevirt.LabelApp: kubevirt.AppVirtLauncher, kubevirt.LabelCreatedBy: string(VMIUID),
			kubevirt.LabelMigrationJobUID: string(MigrationUID)}
	})
	for _, m := range mut {
		m(p)
	}
	return p
}

// TargetAttachmentPod is the attachment pod virt-controller made for the
// target launcher, changed by mut.
func TargetAttachmentPod(mut ...func(*corev1.Pod)) *corev1.Pod {
	p := AttachmentPod(func(p *corev1.Pod) {
		p.Name, p.UID, p.Spec.NodeName = "hp-volume-target", TargetAttachUID, TargetNode
		p.Labels = map[string]string{kubevirt.LabelApp: kubevirt.AppHotplugDisk, kubevirt.LabelMigrationJobUID: string(MigrationUID)}
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = targetLauncher, TargetLauncherUID
	})
	for _, m := range mut {
		m(p)
	}
	return p
}

// Migrating puts the VMI u in the state virt-controller leaves at the
// handoff of a migration from Node to TargetNode: both launchers active,
// the target label, and status.migrationState; mut then changes the
// migration state (completed, failed, abortStatus...). It returns u.
func Migrating(u *unstructured.Unstructured, mut ...func(ms map[string]any)) *unstructured.Unstructured {
	ms := map[string]any{
		"migrationUid": string(MigrationUID), "sourceNode": Node, "sourcePod": "virt-launcher-vm1-abcde",
		"targetNode": TargetNode, "targetPod": targetLauncher, "targetAttachmentPodUID": string(TargetAttachUID),
	}
	for _, m := range mut {
		m(ms)
	}
	labels := u.GetLabels()
	labels[kubevirt.LabelMigrationTargetNode] = TargetNode
	u.SetLabels(labels)
	status := u.Object["status"].(map[string]any)
	status["migrationState"] = ms
	status["activePods"] = map[string]any{string(LauncherUID): Node, string(TargetLauncherUID): TargetNode}
	return u
}
