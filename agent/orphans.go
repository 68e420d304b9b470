// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
)

// orphanSweepKey is the one key of the sweep's own queue (Agent.sweeps):
// a sweep belongs to no VMI, so it runs in a loop of its own, retried on
// failure like a reconcile, and never holds a VMI worker.
const orphanSweepKey = "orphans"

// sweepLoop runs the sweep whenever it is asked for (once the caches
// synced, and every resync period), until its queue shuts down.
func (a *Agent) sweepLoop(ctx context.Context) {
	for {
		key, quit := a.sweeps.Get()
		if quit {
			return
		}
		start := time.Now()
		err := a.sweepOrphans(ctx)
		// Counted with the reconciles, as it was while it shared their queue.
		a.reportReconciled(start)
		switch {
		case err == nil || ctx.Err() != nil:
			a.sweeps.Forget(key)
		default:
			a.log.Warn("orphan sweep failed, retrying", "error", err.Error(), "retries", a.sweeps.NumRequeues(key))
			a.sweeps.AddRateLimited(key)
		}
		a.sweeps.Done(key)
	}
}

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
	snap, read, err := a.snapshotFor(ctx)
	a.reportSnapshot(read)
	if err != nil {
		return err
	}
	launchers, err := a.engine.Launchers(ctx, snap)
	if err != nil {
		return err
	}
	snap, read, err = a.snapshotFor(ctx, launchers...)
	a.reportSnapshot(read)
	if err != nil {
		return err
	}
	// Nothing is remembered of an orphan: it belongs to no known VMI, so
	// it gets no Events, only logs and metrics.
	st := newVMIState()
	var errs []error
	for _, uid := range launchers {
		pod, ok := a.PodByUID(uid)
		if ok && !sweepable(pod) {
			continue
		}
		log := a.log.With("launcher", string(uid), "orphan", true)
		errs = append(errs, a.sweepLauncher(ctx, snap, st, log, uid, pod))
	}
	return errors.Join(errs...)
}

// sweepLauncher empties one orphan's hotplug-disks: the plan of a launcher
// that wants nothing, summarized and reported like a reconcile's. pod is
// the launcher's pod while the cache has it (terminated), else nil.
func (a *Agent) sweepLauncher(ctx context.Context, snap Snapshot, st *vmiState, log *slog.Logger, launcher types.UID, pod *corev1.Pod) error {
	observed, err := a.engine.Observe(ctx, snap, launcher)
	if err != nil {
		return fmt.Errorf("observe gone launcher %s: %w", launcher, err)
	}
	in := planInput{Observed: observed}
	if pod != nil && len(observed) > 0 {
		if in.LeftToHandler, err = a.sweepLeaves(ctx, pod); err != nil {
			return err
		}
	}
	done := a.apply(ctx, "", snap, launcher, buildPlan(in))
	s := summarize(summaryInput{Observed: observed, Applied: done})
	a.reportPart(st, nil, log, s)
	return errors.Join(s.Errs...)
}

// sweepLeaves is the record rule (leftToHandler) for a terminated launcher
// pod: what virt-handler's record of the pod's VMI names there is virt-
// handler's to remove while that VMI exists. A failed migration's target
// is such a launcher (kubevirt#17882): its Unmount removes those binds
// should the VMI migrate to this node again, and fails at every sync if
// they are gone. Once the VMI is gone from the API server, virt-handler's
// cleanup has run, and its UnmountAll passes over a target that is gone:
// what is left then is a leak the sweep removes, as it is where no record
// names the launcher.
func (a *Agent) sweepLeaves(ctx context.Context, pod *corev1.Pod) (func(string) bool, error) {
	name, vmi, ok := kubevirt.LauncherVMI(pod)
	if !ok {
		return nil, nil
	}
	rec, err := a.engine.HandlerRecord(ctx, vmi)
	if err != nil {
		return nil, fmt.Errorf("read virt-handler's record of vmi %s for launcher %s: %w", vmi, pod.UID, err)
	}
	if rec.Stuck != "" || !rec.Names(pod.UID) {
		return nil, nil
	}
	gone, err := a.confirmGone(ctx, pod.Namespace+"/"+name, vmi)
	a.reportGoneCheck(gone)
	switch {
	case err != nil:
		return nil, fmt.Errorf("launcher %s: %w", pod.UID, err)
	case gone == GoneConfirmed || gone == GoneReplaced:
		return nil, nil
	}
	return func(volume string) bool { return rec.Leaves(pod.UID, volume) }, nil
}

// sweepable reports whether the sweep may detach what the hotplug-disks
// directory of a cached pod holds: only a terminated virt-launcher's. Any
// pod can have an emptyDir named hotplug-disks; another tenant's pod, even
// terminated, holds nothing of hpmount's, and the sweep would remove its
// files, block nodes and device-cgroup rules.
func sweepable(pod *corev1.Pod) bool {
	return pod.Labels[kubevirt.LabelApp] == kubevirt.AppVirtLauncher && kubevirt.PodTerminated(pod)
}
