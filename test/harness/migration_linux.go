// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/test/simnode"
)

// Migration is a live migration of a VM to another simulated node, as
// virt-controller and the target's kubelet drive it: a target launcher
// with its own attachment pod carrying every hotplug volume, published on
// the target node, then the handoff written into the VMI.
type Migration struct {
	VM     *VM
	Target *simnode.Node
	UID    types.UID
	// Launcher and L are the target launcher's pod and process.
	Launcher  *corev1.Pod
	L         *simnode.Launcher
	AttachPod *corev1.Pod
	// State is status.migrationState as virt-controller and virt-handler
	// write it.
	State map[string]any
	// done: the handoff completed and the VM runs on Target.
	done bool
	// finalized: the target's virt-handler removed the target label, and
	// source is what MoveNode handed over from (handoff_linux.go).
	finalized bool
	source    *handoffSource
}

// StartMigration makes the target launcher and its attachment pod on
// target, publishes every volume there, and writes the handoff: both
// launchers active, the target label and status.migrationState.
func (v *VM) StartMigration(ctx context.Context, target *simnode.Node) (*Migration, error) {
	m := &Migration{VM: v, Target: target, UID: types.UID("migration-" + strconv.FormatInt(time.Now().UnixNano(), 36))}
	var err error
	if m.Launcher, err = v.Ctrl.CreateLauncherPod(ctx, v.NS, v.Name, v.UID, target.Name); err != nil {
		return nil, fmt.Errorf("create target launcher pod: %w", err)
	}
	if m.L, err = target.StartLauncher(string(m.Launcher.UID)); err != nil {
		return nil, fmt.Errorf("start target launcher: %w", err)
	}
	if m.AttachPod, err = v.Ctrl.CreateAttachmentPod(ctx, m.Launcher, v.Vols); err != nil {
		return nil, fmt.Errorf("create target attachment pod: %w", err)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"kubevirt.io/migrationJobUID":%q}}}`, m.UID)
	if m.AttachPod, err = v.Ctrl.Kube.CoreV1().Pods(v.NS).Patch(ctx, m.AttachPod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("label target attachment pod: %w", err)
	}
	for _, vol := range v.Vols {
		if err := m.publish(vol); err != nil {
			return nil, err
		}
	}
	m.State = map[string]any{
		"migrationUid": string(m.UID), "sourceNode": v.Node.Name, "sourcePod": v.Launcher.Name,
		"targetNode": target.Name, "targetPod": m.Launcher.Name, "targetAttachmentPodUID": string(m.AttachPod.UID),
	}
	v.Migration = m
	return m, v.Apply(ctx)
}

// publish is the target kubelet's NodePublish of vol for the target
// attachment pod: the same disk, under the target node's root.
func (m *Migration) publish(vol simnode.Volume) error {
	d, pod := m.VM.Disks[vol.Name], string(m.AttachPod.UID)
	var err error
	if vol.Block {
		err = m.Target.PublishBlock(pod, vol.PV, d)
	} else {
		err = m.Target.PublishFilesystem(pod, vol.PV, d, 32<<20)
	}
	if err != nil {
		return fmt.Errorf("publish %s on %s: %w", vol.Name, m.Target.Name, err)
	}
	return nil
}

// Complete ends the migration in success: the VMI names the target node
// and launcher, the source launcher pod and attachment pod are deleted
// and the source's kubelet unpublishes the volumes. The VM then is the
// target's.
func (m *Migration) Complete(ctx context.Context) error {
	v := m.VM
	srcLauncher, srcNode := v.Launcher, v.Node
	srcAttach := map[types.UID]bool{}
	for _, uid := range v.Attach {
		srcAttach[uid] = true
	}
	m.State["completed"], m.done = true, true
	v.Node, v.Launcher, v.L = m.Target, m.Launcher, m.L
	for _, vol := range v.Vols {
		v.Attach[vol.Name] = m.AttachPod.UID
	}
	if err := v.Apply(ctx); err != nil {
		return err
	}
	zero := int64(0)
	if err := v.Ctrl.Kube.CoreV1().Pods(v.NS).Delete(ctx, srcLauncher.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return fmt.Errorf("delete source launcher: %w", err)
	}
	for uid := range srcAttach {
		for _, vol := range v.Vols {
			if err := unpublishOn(srcNode, uid, vol); err != nil {
				return err
			}
		}
	}
	return nil
}

// Fail marks the migration failed, as virt-handler does; the target
// launcher pod is left running, as when its deletion lags (kubevirt#17882).
func (m *Migration) Fail(ctx context.Context) error {
	m.State["failed"] = true
	return m.VM.Apply(ctx)
}

// Forget is what follows a failure: the target launcher pod is deleted,
// the target's kubelet unpublishes its volumes, and the VMI no longer
// names the migration's target.
func (m *Migration) Forget(ctx context.Context) error {
	v := m.VM
	zero := int64(0)
	for _, pod := range []*corev1.Pod{m.Launcher, m.AttachPod} {
		if err := v.Ctrl.Kube.CoreV1().Pods(v.NS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("delete %s: %w", pod.Name, err)
		}
	}
	for _, vol := range v.Vols {
		if err := unpublishOn(m.Target, m.AttachPod.UID, vol); err != nil {
			return err
		}
	}
	v.Migration = nil
	return v.Apply(ctx)
}

func unpublishOn(n *simnode.Node, pod types.UID, vol simnode.Volume) error {
	var err error
	if vol.Block {
		err = n.UnpublishBlock(string(pod), vol.PV)
	} else {
		err = n.UnpublishFilesystem(string(pod), vol.PV)
	}
	if err != nil {
		return fmt.Errorf("unpublish %s from pod %s on %s: %w", vol.Name, pod, n.Name, err)
	}
	return nil
}

// render writes the migration into the VMI: while it runs both launchers
// are active; migrationState stays afterwards, as KubeVirt leaves it, and
// the target label until Finalize removes it.
func (m *Migration) render(s *simnode.VMISpec) {
	if m == nil {
		return
	}
	s.MigrationState = m.State
	if !m.finalized {
		s.MigrationTargetNode = m.Target.Name
	}
	if !m.done {
		s.ActivePods = map[types.UID]string{m.VM.Launcher.UID: m.VM.Node.Name, m.Launcher.UID: m.Target.Name}
	}
}

// TargetPath is the host path of a volume's entry in the target
// launcher's hotplug-disks.
func (m *Migration) TargetPath(vol simnode.Volume) string {
	if vol.Block {
		return m.L.Path(vol.Name)
	}
	return m.L.Path(vol.Name + ".img")
}

// ReadThrough reads n bytes at off of path from inside a launcher: its
// mount namespace and its device cgroup, as QEMU would.
func ReadThrough(l *simnode.Launcher, path string, off int64, n int) (string, error) {
	out, err := l.Exec(fmt.Sprintf("dd if=%s bs=1 skip=%d count=%d status=none", path, off, n))
	if err != nil {
		return "", fmt.Errorf("read %q through launcher %s: %w %s", path, l.UID, err, out)
	}
	return out, nil
}
