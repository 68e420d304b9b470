package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// reconcile brings one VMI's launcher in line with the VMI. Every engine
// call of one reconcile uses one Snapshot of the mount table, itself shared
// with other VMIs' reconciles while it is current (see snapshots.go).
func (a *Agent) reconcile(ctx context.Context, key string) error {
	start := time.Now()
	defer func() { a.obs.Reconciled(time.Since(start)) }()
	if key == orphanSweepKey {
		return a.sweepOrphans(ctx)
	}
	if !a.synced.Load() {
		return errors.New("informer caches not synced")
	}
	resync := a.takeResync(key)
	u, exists, err := a.lookupVMI(key)
	if err != nil {
		return err
	}
	if !exists {
		// Absent from every synced cache: gone from this node, once the
		// API server confirms it (gone.go).
		return a.cleanupGone(ctx, key)
	}
	vmi, err := kubevirt.DecodeVMI(u)
	if err != nil {
		// Retrying cannot help until the object changes, which enqueues it.
		a.log.Error("cannot decode vmi", "vmi", key, "error", err.Error())
		return nil
	}
	return a.reconcileVMI(ctx, key, vmi, resync, a.takeArrival(key, start))
}

// reconcileVMI cleans the VMI's launchers that are gone or abandoned by a
// failed migration, and reconciles the one that runs here.
func (a *Agent) reconcileVMI(ctx context.Context, key string, vmi *kubevirt.VMI, resync bool, arrived time.Time) error {
	st := a.stateFor(key, vmi.UID)
	ref := vmiRef(vmi.Namespace, vmi.Name, vmi.UID, vmi.ResourceVersion)
	log := a.log.With("vmi", key)
	choice := kubevirt.ChooseLauncher(vmi, a.cfg.NodeName, a)
	a.noteMigration(st, log, choice.Migration)
	launcher := choice.Launcher
	if choice.Refusal != nil {
		a.emit(st, ref, log, refusalEvent("", choice.Refusal))
	}
	if choice.Why != "" {
		a.emit(st, ref, log, event{Type: corev1.EventTypeNormal, Reason: EventLauncherChosen, Message: choice.Why, Once: true})
	}
	abandoned := a.abandonedLaunchers(st, vmi, choice)
	stale := a.staleLaunchers(st, launcher, abandoned)
	if launcher != nil {
		st.launchers[launcher.UID] = true
		delete(st.warned, onceKey("", EventHotplugRefused))
	}
	if launcher == nil && len(stale) == 0 {
		a.reportPending(vmi)
		return nil
	}
	involved := slices.Clone(stale)
	if launcher != nil {
		involved = append(involved, launcher.UID)
	}
	snap, err := a.snapshotFor(ctx, involved...)
	if err != nil {
		return err
	}
	errs := a.cleanLaunchers(ctx, snap, st, ref, log, stale)
	a.reportTargetCleaned(st, ref, log, abandoned)
	if launcher != nil {
		view := kubevirt.ForLauncher(vmi, a.cfg.NodeName, launcher, a)
		errs = append(errs, a.reconcileLauncher(ctx, snap, st, view, launcher, resync, arrived))
	}
	return errors.Join(errs...)
}

// reconcileLauncher runs one pass for the VMI's verified launcher:
// desired → observed → plan → apply → summarize → report. vmi is the VMI
// as the launcher is judged (kubevirt.ForLauncher).
func (a *Agent) reconcileLauncher(ctx context.Context, snap Snapshot, st *vmiState, vmi *kubevirt.VMI, launcher *corev1.Pod, resync bool, arrived time.Time) error {
	a.pruneState(st, vmi)
	a.growth.prune(vmi.Namespace+"/"+vmi.Name, func(k growKey) bool { return k.launcher == launcher.UID && vmi.Spec.HasVolume(k.volume) })
	intents := buildIntents(ctx, vmi, launcher, a, a.resolvePV)
	observed, err := a.engine.Observe(ctx, snap, launcher.UID)
	if r := kubevirt.RefusalOf(err); r != nil {
		// hotplug-disks itself is unsafe (a symlink, a parent that is
		// one): no volume can be served and retrying cannot help until it
		// is repaired; a resync looks again. The key names no volume.
		ref := vmiRef(vmi.Namespace, vmi.Name, vmi.UID, vmi.ResourceVersion)
		a.emit(st, ref, a.log.With("vmi", vmi.Namespace+"/"+vmi.Name), refusalEvent(launcherDirKey, r))
		return nil
	}
	if err != nil {
		return fmt.Errorf("observe launcher %s/%s: %w", launcher.Namespace, launcher.Name, err)
	}
	noteWanted(st, intents, observed, arrived)
	compute := string(launcher.UID) + " " + kubevirt.ComputeContainerID(launcher)
	plan := buildPlan(planInput{
		Spec: &vmi.Spec, Intents: intents, Observed: observed,
		Resync: resync, VerifyBlock: st.compute != "" && st.compute != compute, GrowFilesystems: a.cfg.GrowFilesystems,
		CapacityChanged: func(name string, c int64) bool {
			last, ok := st.capacity[name]
			return !ok || last != c
		},
		GrowthReady: a.growth.ready(vmi.Namespace+"/"+vmi.Name, launcher.UID),
	})
	done := a.apply(ctx, vmi.Namespace+"/"+vmi.Name, snap, launcher.UID, plan)
	if !slices.ContainsFunc(done, func(d applied) bool { return d.Op.Kind == outcome.Verify && d.Result == outcome.Error }) {
		st.compute = compute // else the retry verifies again
	}
	target := targetSide(vmi, st.migration.Migration, launcher)
	writeStatus := a.cfg.ReportVolumeStatus && !target
	s := summarize(summaryInput{
		VMI: vmi, Intents: intents, Observed: observed, Applied: done,
		ReportVolumeStatus: writeStatus, LastCapacity: maps.Clone(st.capacity),
	})
	ref := vmiRef(vmi.Namespace, vmi.Name, vmi.UID, vmi.ResourceVersion)
	log := a.log.With("vmi", vmi.Namespace+"/"+vmi.Name)
	a.report(st, ref, log, s)
	if target {
		a.reportTargetReady(st, ref, log, launcher, s, len(intents))
	}
	if s.Requeue {
		a.queue.AddAfter(vmi.Namespace+"/"+vmi.Name, time.Second)
	}
	if writeStatus && len(s.Status) > 0 {
		a.status.add(vmi.Namespace+"/"+vmi.Name, s.Status)
	}
	return errors.Join(s.Errs...)
}

// launcherDirKey is the volume of a refusal of the launcher's hotplug-disks
// directory as a whole: no volume name contains "/", so it cannot collide.
const launcherDirKey = "hotplug-disks/"

// staleLaunchers lists the launchers to empty: those remembered for the
// VMI, other than the current one, that are gone from this node or have
// terminated, and the abandoned targets of a failed migration.
func (a *Agent) staleLaunchers(st *vmiState, current *corev1.Pod, abandoned []types.UID) []types.UID {
	stale := slices.Clone(abandoned)
	for _, uid := range slices.Sorted(maps.Keys(st.launchers)) {
		if current != nil && uid == current.UID || slices.Contains(stale, uid) {
			continue
		}
		if pod, ok := a.PodByUID(uid); !ok || kubevirt.PodTerminated(pod) {
			stale = append(stale, uid)
		}
	}
	return stale
}

// cleanLaunchers detaches everything from launchers that are gone and
// forgets each one that is clean.
func (a *Agent) cleanLaunchers(ctx context.Context, snap Snapshot, st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, uids []types.UID) []error {
	var errs []error
	for _, uid := range uids {
		if err := a.detachAll(ctx, snap, st, ref, log.With("launcher", string(uid)), uid); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(st.launchers, uid)
	}
	return errs
}

// detachAll removes everything observed in a launcher that is gone: the
// plan of a VMI that wants nothing there.
func (a *Agent) detachAll(ctx context.Context, snap Snapshot, st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, launcher types.UID) error {
	observed, err := a.engine.Observe(ctx, snap, launcher)
	if err != nil {
		return fmt.Errorf("observe gone launcher %s: %w", launcher, err)
	}
	done := a.apply(ctx, "", snap, launcher, buildPlan(planInput{Observed: observed}))
	s := summarize(summaryInput{Observed: observed, Applied: done})
	a.report(st, ref, log, s)
	return errors.Join(s.Errs...)
}

// cleanupGone detaches everything of a VMI that left this node's cache and
// forgets it once that succeeded.
func (a *Agent) cleanupGone(ctx context.Context, key string) error {
	a.mu.Lock()
	st, ok := a.states[key]
	a.mu.Unlock()
	if !ok {
		return nil
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	log := a.log.With("vmi", key)
	ref := vmiRef(ns, name, st.uid, "")
	clean, held := a.heldForHandoff(st)
	if len(clean) > 0 && !a.goneConfirmed(ctx, key, st.uid) {
		return nil
	}
	if len(clean) > 0 {
		snap, err := a.snapshotFor(ctx, clean...)
		if err != nil {
			return err
		}
		if err := errors.Join(a.cleanLaunchers(ctx, snap, st, ref, log, clean)...); err != nil {
			return err
		}
	}
	if len(held) > 0 {
		// The pod's end, or the resync, brings the key back.
		log.Debug("vmi left for its migration target; the source launcher keeps its mounts until it stops", "launchers", len(held))
		return nil
	}
	if m := st.migration; m.Role == kubevirt.RoleSource && !m.Ended() && len(clean) > 0 {
		a.obs.Migration(MigrationSourceCleaned, 0)
		a.emit(st, ref, log, event{Type: corev1.EventTypeNormal, Reason: EventMigrationSourceCleaned,
			Message: fmt.Sprintf("The VMI left node %s for %s (migration %s) and its source virt-launcher pod, now gone, holds nothing of its hotplug volumes",
				a.cfg.NodeName, m.TargetNode, m.UID)})
	}
	log.Info("vmi gone from node, forgetting it")
	a.forget(key)
	a.obs.ForgetVMI(ns, name)
	return nil
}

// resolvePV maps a claim to its PV from the claim cache: no API call on the
// reconcile path, and a claim deleted and created again under the same
// name is seen as it is now.
func (a *Agent) resolvePV(_ context.Context, ns, claim string) (string, error) {
	if claim == "" {
		return "", errors.New("volume names no claim")
	}
	return a.ClaimVolume(ns, claim)
}

// pruneState drops remembered data of volumes that left the VMI.
func (a *Agent) pruneState(st *vmiState, vmi *kubevirt.VMI) {
	for name := range st.capacity {
		if !vmi.Spec.HasVolume(name) {
			delete(st.capacity, name)
		}
	}
	for name := range st.wanted {
		if !vmi.Spec.HasVolume(name) {
			delete(st.wanted, name)
		}
	}
}

// noteWanted starts the attach latency of every volume that is desired but
// not usable yet, at the arrival of the VMI change being reconciled. A
// volume already usable when first seen (adopted after a restart) has none.
func noteWanted(st *vmiState, intents []volumeIntent, observed []ObservedVolume, arrived time.Time) {
	for i := range intents {
		it := &intents[i]
		if _, ok := st.wanted[it.Name]; ok || it.Refused != nil {
			continue
		}
		if !findObserved(observed, it.Name).Healthy(it.Desired.Mode) {
			st.wanted[it.Name] = arrived
		}
	}
}

// reportPending marks every hotplug volume pending when there is no
// launcher to attach to.
func (a *Agent) reportPending(vmi *kubevirt.VMI) {
	for _, c := range vmi.Spec.HotplugClaims() {
		a.obs.VolumeState(vmi.Namespace, vmi.Name, c.Name, string(vmi.Status.VolumeStatusByName(c.Name).Mode()), StatePending)
	}
}
