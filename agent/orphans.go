package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// orphanSweepKey is the work-queue key of the sweep for what deleted
// launchers left behind. It cannot collide with a namespace/name key.
const orphanSweepKey = "\x00orphans"

// sweepOrphans detaches everything in the hotplug-disks directory of a pod
// that is confirmed gone from the synced pod cache of this node, or has
// terminated: no QEMU can be using it, and our mounts would keep the
// kubelet from removing the pod's directory. This finds what a VMI deleted
// while the agent was down left behind. A running launcher is never
// touched here, whatever its VMI does; that is reconcile's business.
func (a *Agent) sweepOrphans(ctx context.Context) error {
	if !a.synced.Load() {
		return errors.New("informer caches not synced")
	}
	snap, err := a.snapshot(ctx)
	if err != nil {
		return err
	}
	launchers, err := a.engine.Launchers(ctx, snap)
	if err != nil {
		return err
	}
	var errs []error
	for _, uid := range launchers {
		if pod, ok := a.PodByUID(uid); ok && !podTerminated(pod) {
			continue
		}
		errs = append(errs, a.detachOrphan(ctx, snap, uid))
	}
	return errors.Join(errs...)
}

func (a *Agent) detachOrphan(ctx context.Context, snap Snapshot, launcher types.UID) error {
	log := a.log.With("launcher", string(launcher))
	observed, err := a.engine.Observe(ctx, snap, launcher)
	if err != nil {
		return err
	}
	var errs []error
	for i := range observed {
		o := &observed[i]
		t := time.Now()
		change, err := a.engine.Detach(ctx, snap, launcher, *o)
		if err != nil {
			a.obs.OpAttempt(string(opDetach), "error", time.Since(t))
			log.Error("cannot detach what a deleted launcher left", "volume", o.Name, "op", string(opDetach), "error", err.Error())
			errs = append(errs, err)
			continue
		}
		a.obs.OpAttempt(string(opDetach), string(change), time.Since(t))
		log.Info("detached what a deleted launcher left", "volume", o.Name, "op", string(opDetach), "change", string(change))
	}
	return errors.Join(errs...)
}
