// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/test/simnode"
)

// Why a migration can also end label by label.
//
// KubeVirt ends a successful migration in separate VMI updates made by two
// virt-handlers: the source's moves kubevirt.io/nodeName (and
// status.nodeName) to the target once the target runs the domain; the
// target's marks the migration completed and removes
// kubevirt.io/migrationTargetNodeName. An agent watches the two labels
// through two informers, so it may see the updates in either order.
// Complete writes the end in one update; MoveNode, Finalize and
// RetireSource write it step by step, in the order a test chooses.

// handoffSource is what MoveNode handed over from.
type handoffSource struct {
	launcher *corev1.Pod
	node     *simnode.Node
	attach   map[types.UID]bool
}

// MoveNode writes the VMI as the source's virt-handler does after the
// handoff: the nodeName label, status.nodeName and the active pod name the
// target, whose attachment pod serves every volume. The target label stays
// until Finalize.
func (m *Migration) MoveNode(ctx context.Context) error {
	v := m.VM
	if m.done {
		return fmt.Errorf("migration %s: the node already moved", m.UID)
	}
	src := &handoffSource{launcher: v.Launcher, node: v.Node, attach: map[types.UID]bool{}}
	for _, uid := range v.Attach {
		src.attach[uid] = true
	}
	m.source, m.done = src, true
	v.Node, v.Launcher, v.L = m.Target, m.Launcher, m.L
	for _, vol := range v.Vols {
		v.Attach[vol.Name] = m.AttachPod.UID
	}
	return v.Apply(ctx)
}

// Finalize writes the VMI as the target's virt-handler does when the
// migration ends: completed, and the target label removed.
func (m *Migration) Finalize(ctx context.Context) error {
	m.State["completed"], m.finalized = true, true
	return m.VM.Apply(ctx)
}

// RetireSource is what follows MoveNode: the source launcher pod is
// deleted and the source's kubelet unpublishes the volumes of its
// attachment pods.
func (m *Migration) RetireSource(ctx context.Context) error {
	src := m.source
	if src == nil {
		return fmt.Errorf("migration %s: the node has not moved", m.UID)
	}
	v := m.VM
	zero := int64(0)
	if err := v.Ctrl.Kube.CoreV1().Pods(v.NS).Delete(ctx, src.launcher.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return fmt.Errorf("delete source launcher: %w", err)
	}
	for uid := range src.attach {
		for _, vol := range v.Vols {
			if err := unpublishOn(src.node, uid, vol); err != nil {
				return err
			}
		}
	}
	return nil
}
