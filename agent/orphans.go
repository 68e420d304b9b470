package agent

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/kubevirt"
)

// orphanSweepKey is the work-queue key of the sweep for what deleted
// launchers left behind. It cannot collide with a namespace/name key.
const orphanSweepKey = "\x00orphans"

// sweepOrphans detaches everything in the hotplug-disks directory of a pod
// that is confirmed gone from the synced pod cache of this node, or is a
// virt-launcher that has terminated: no QEMU can be using it, and our
// mounts would keep the kubelet from removing the pod's directory. This
// finds what a VMI deleted while the agent was down left behind. A running
// launcher is never touched here, whatever its VMI does; that is
// reconcile's business.
func (a *Agent) sweepOrphans(ctx context.Context) error {
	if !a.synced.Load() {
		return errors.New("informer caches not synced")
	}
	snap, err := a.snapshotFor(ctx)
	if err != nil {
		return err
	}
	launchers, err := a.engine.Launchers(ctx, snap)
	if err != nil {
		return err
	}
	if snap, err = a.snapshotFor(ctx, launchers...); err != nil {
		return err
	}
	// Nothing is remembered of an orphan: it belongs to no known VMI, so
	// it gets no Events, only logs and metrics.
	st := newVMIState()
	var errs []error
	for _, uid := range launchers {
		if pod, ok := a.PodByUID(uid); ok && !sweepable(pod) {
			continue
		}
		log := a.log.With("launcher", string(uid), "orphan", true)
		errs = append(errs, a.detachAll(ctx, snap, st, nil, log, uid))
	}
	return errors.Join(errs...)
}

// sweepable reports whether the sweep may detach what the hotplug-disks
// directory of a cached pod holds: only a terminated virt-launcher's. Any
// pod can have an emptyDir named hotplug-disks; another tenant's pod, even
// terminated, holds nothing of hpmount's, and the sweep would remove its
// files, block nodes and device-cgroup rules.
func sweepable(pod *corev1.Pod) bool {
	return pod.Labels[kubevirt.LabelApp] == kubevirt.AppVirtLauncher && kubevirt.PodTerminated(pod)
}
