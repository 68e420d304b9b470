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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/isolation"
)

const apiTimeout = 10 * time.Second

// reconcile brings one VMI's launcher in line with the VMI. Every engine
// call of one reconcile shares one Snapshot: the reconcile is one batch,
// one mountinfo scan.
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
	u, exists, err := a.cachedVMI(key)
	if err != nil {
		return err
	}
	if !exists {
		// Confirmed absence from a synced cache: the VMI is gone from
		// this node.
		return a.cleanupGone(ctx, key)
	}
	vmi, err := DecodeVMI(u)
	if err != nil {
		// Retrying cannot help until the object changes, which enqueues it.
		a.log.Error("cannot decode vmi", "vmi", key, "error", err.Error())
		return nil
	}
	st := a.state(key)
	if st.uid != vmi.UID {
		// A new VMI under the same name: keep only the launchers to clean.
		launchers := st.launchers
		*st = *newVMIState()
		st.launchers = launchers
		st.uid = vmi.UID
	}
	ref := vmiRef(vmi.Namespace, vmi.Name, vmi.UID, vmi.ResourceVersion)
	log := a.log.With("vmi", key)

	launcher, lerr := findLauncher(vmi, a.cfg.NodeName, a)
	var refusal *Refusal
	if errors.As(lerr, &refusal) {
		a.refuse(st, ref, log, "", refusal)
	}
	var stale []types.UID
	for uid := range st.launchers {
		if launcher != nil && uid == launcher.UID {
			continue
		}
		if pod, ok := a.PodByUID(uid); !ok || podTerminated(pod) {
			stale = append(stale, uid)
		}
	}
	if launcher != nil {
		st.launchers[launcher.UID] = true
		delete(st.warned, "/"+reasonHotplugRefusedEvent)
	}
	if launcher == nil && len(stale) == 0 {
		a.reportPending(vmi)
		return nil
	}

	snap, err := a.snapshot(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, uid := range stale {
		if err := a.detachAll(ctx, snap, ref, log, uid); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(st.launchers, uid)
	}
	if launcher == nil {
		return errors.Join(errs...)
	}
	errs = append(errs, a.reconcileLauncher(ctx, snap, st, vmi, u, launcher, resync))
	return errors.Join(errs...)
}

// reconcileLauncher plans and applies the VMI's volumes for its verified
// launcher.
func (a *Agent) reconcileLauncher(ctx context.Context, snap Snapshot, st *vmiState, vmi *VMI, u *unstructured.Unstructured, launcher *corev1.Pod, resync bool) error {
	key := vmi.Namespace + "/" + vmi.Name
	log := a.log.With("vmi", key)
	ref := vmiRef(vmi.Namespace, vmi.Name, vmi.UID, vmi.ResourceVersion)
	a.pruneState(st, vmi)

	intents := buildIntents(ctx, vmi, launcher, a, a.resolvePV(st))
	observed, err := a.engine.Observe(ctx, snap, launcher.UID)
	if err != nil {
		return fmt.Errorf("observe launcher %s/%s: %w", launcher.Namespace, launcher.Name, err)
	}
	plan := buildPlan(planInput{
		Spec:            &vmi.Spec,
		Intents:         intents,
		Observed:        observed,
		Resync:          resync,
		GrowFilesystems: a.cfg.GrowFilesystems,
		CapacityChanged: func(name string, c int64) bool {
			last, ok := st.capacity[name]
			return !ok || last != c
		},
	})

	mounted := map[string]bool{}
	for i := range intents {
		it := &intents[i]
		if it.Refused == nil && healthy(findObserved(observed, it.Desired.Name), it.Desired.Mode) {
			mounted[it.Desired.Name] = true
		}
	}
	updates := map[string]statusUpdate{}
	failed := map[string]bool{}
	attached := false
	var errs []error
	for _, o := range plan {
		vlog := log.With("volume", o.Name, "op", string(o.Kind))
		switch o.Kind {
		case opDetach:
			if err := a.applyDetach(ctx, snap, ref, vlog, launcher.UID, o.Observed); err != nil {
				errs = append(errs, err)
				continue
			}
			if vmi.Status.VolumeStatusByName(o.Name) != nil {
				updates[o.Name] = statusUpdate{PhaseUnMountedFromPod, ReasonUnMounted, fmt.Sprintf("Volume %s has been unmounted from virt-launcher pod", o.Name)}
			}
			a.obs.VolumeState(vmi.Namespace, vmi.Name, o.Name, string(o.Observed.Mode), StateUnmounted)
		case opAttach, opVerify:
			ok, err := a.applyAttach(ctx, snap, st, ref, vlog, o)
			if err != nil {
				errs = append(errs, err)
			}
			if ok && !healthy(o.Observed, o.Intent.Desired.Mode) {
				attached = true
			}
			if ok {
				mounted[o.Name] = true
			} else {
				failed[o.Name] = true
			}
		case opGrow:
			if failed[o.Name] {
				continue
			}
			a.applyGrow(ctx, snap, st, vmi, ref, vlog, o.Intent)
		}
	}

	for i := range intents {
		it := &intents[i]
		name := it.Desired.Name
		if it.Refused == nil {
			delete(st.warned, name+"/"+reasonHotplugRefusedEvent)
		}
		switch {
		case it.Refused != nil:
			a.refuse(st, ref, log.With("volume", name), name, it.Refused)
			a.obs.VolumeState(vmi.Namespace, vmi.Name, name, string(it.Desired.Mode), StateRefused)
		case mounted[name]:
			if a.cfg.ReportVolumeStatus && it.Status != nil && it.Status.Phase != PhaseMountedToPod && it.Status.Phase != PhaseReady {
				updates[name] = statusUpdate{PhaseMountedToPod, ReasonMountedToPod, fmt.Sprintf("Volume %s has been mounted in virt-launcher pod", name)}
			}
			a.obs.VolumeState(vmi.Namespace, vmi.Name, name, string(it.Desired.Mode), StateMounted)
		case failed[name]:
			a.obs.VolumeState(vmi.Namespace, vmi.Name, name, string(it.Desired.Mode), StateFailed)
		default:
			a.obs.VolumeState(vmi.Namespace, vmi.Name, name, string(it.Desired.Mode), StatePending)
		}
		if it.Transient != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", name, it.Transient))
		}
	}
	if attached {
		// Check what was just attached (growth, sizes) against a fresh
		// snapshot soon, rather than waiting for the resync.
		a.queue.AddAfter(key, time.Second)
	}
	if a.cfg.ReportVolumeStatus && len(updates) > 0 {
		if err := a.patchVolumeStatus(ctx, u, updates); err != nil {
			log.Warn("cannot report volume status", "error", err.Error())
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podTerminated reports whether all containers of the pod have stopped for
// good. A terminated launcher runs no QEMU; its mounts must go, or the
// kubelet cannot tear down its emptyDir and the pod never disappears.
func podTerminated(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	// A deleted pod whose containers all stopped: the kubelet is tearing
	// down its volumes and waits for our mounts to go.
	if pod.DeletionTimestamp == nil || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

func findObserved(obs []ObservedVolume, name string) *ObservedVolume {
	for i := range obs {
		if obs[i].Name == name {
			return &obs[i]
		}
	}
	return nil
}

// applyAttach calls Engine.Attach. It reports whether the volume is (or
// stays) mounted. A volume that is observed healthy but no longer published
// by its attachment pod is kept: that is the state after the attachment pod
// was replaced.
func (a *Agent) applyAttach(ctx context.Context, snap Snapshot, st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, o op) (bool, error) {
	wasHealthy := healthy(o.Observed, o.Intent.Desired.Mode)
	t := time.Now()
	change, err := a.engine.Attach(ctx, snap, o.Intent.Desired)
	d := time.Since(t)
	switch {
	case errors.Is(err, ErrNotPublished):
		a.obs.OpAttempt(string(o.Kind), "not-published", d)
		if wasHealthy {
			log.Debug("volume not published by the attachment pod any more; keeping the healthy mount")
			return true, nil
		}
		log.Info("volume not published yet by the attachment pod")
		return false, fmt.Errorf("volume %q: %w", o.Name, err)
	case errors.Is(err, isolation.ErrUnsafePath):
		// Tenant content the engine will not touch (a disk.img that is a
		// link, a device, a hard link...): a refusal, reported with the
		// other refusals of this volume, not an error to retry quickly.
		a.obs.OpAttempt(string(o.Kind), "refused", d)
		o.Intent.Refused = &Refusal{RefusedUnsafeContent, fmt.Sprintf("volume %q: %v", o.Name, err)}
		return false, nil
	case err != nil:
		a.obs.OpAttempt(string(o.Kind), "error", d)
		if ctx.Err() != nil {
			return wasHealthy, err
		}
		log.Error("attach failed", "error", err.Error())
		a.warnOnce(st, ref, o.Name, "HotplugFailed", fmt.Sprintf("Volume %s could not be made available in virt-launcher pod: %v", o.Name, err))
		return wasHealthy, fmt.Errorf("attach volume %q: %w", o.Name, err)
	}
	a.obs.OpAttempt(string(o.Kind), string(change), d)
	delete(st.warned, o.Name+"/HotplugFailed")
	if change != Unchanged {
		log.Info("volume attached", "change", string(change), "mode", string(o.Intent.Desired.Mode))
		a.recorder.Eventf(ref, corev1.EventTypeNormal, "VolumeMounted", "Volume %s has been mounted in virt-launcher pod (%s)", o.Name, change)
	}
	return true, nil
}

func (a *Agent) applyDetach(ctx context.Context, snap Snapshot, ref *corev1.ObjectReference, log *slog.Logger, launcher types.UID, o *ObservedVolume) error {
	t := time.Now()
	change, err := a.engine.Detach(ctx, snap, launcher, *o)
	d := time.Since(t)
	if err != nil {
		a.obs.OpAttempt(string(opDetach), "error", d)
		log.Error("detach failed", "error", err.Error())
		if ctx.Err() == nil {
			a.recorder.Eventf(ref, corev1.EventTypeWarning, "HotplugFailed", "Volume %s could not be removed from virt-launcher pod: %v", o.Name, err)
		}
		return fmt.Errorf("detach volume %q: %w", o.Name, err)
	}
	a.obs.OpAttempt(string(opDetach), string(change), d)
	if change != Unchanged {
		log.Info("volume detached", "change", string(change))
		a.recorder.Eventf(ref, corev1.EventTypeNormal, "VolumeUnmounted", "Volume %s has been unmounted from virt-launcher pod", o.Name)
	}
	return nil
}

// detachAll removes everything observed in a launcher that is gone.
func (a *Agent) detachAll(ctx context.Context, snap Snapshot, ref *corev1.ObjectReference, log *slog.Logger, launcher types.UID) error {
	observed, err := a.engine.Observe(ctx, snap, launcher)
	if err != nil {
		return fmt.Errorf("observe gone launcher %s: %w", launcher, err)
	}
	var errs []error
	for _, o := range buildPlan(planInput{Observed: observed}) {
		if err := a.applyDetach(ctx, snap, ref, log.With("volume", o.Name, "op", string(o.Kind), "launcher", string(launcher)), launcher, o.Observed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cleanupGone detaches everything of a VMI that left this node's cache and
// forgets it once that succeeded.
func (a *Agent) cleanupGone(ctx context.Context, key string) error {
	a.mu.Lock()
	st, ok := a.states[key]
	a.mu.Unlock()
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if !ok {
		return nil
	}
	log := a.log.With("vmi", key)
	if len(st.launchers) > 0 {
		snap, err := a.snapshot(ctx)
		if err != nil {
			return err
		}
		ref := vmiRef(ns, name, st.uid, "")
		var errs []error
		for _, uid := range slices.Sorted(maps.Keys(st.launchers)) {
			if err := a.detachAll(ctx, snap, ref, log, uid); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(st.launchers, uid)
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	log.Info("vmi gone from node, forgetting it")
	a.forget(key)
	a.obs.ForgetVMI(ns, name)
	return nil
}

func (a *Agent) snapshot(ctx context.Context) (Snapshot, error) {
	t := time.Now()
	snap, err := a.engine.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("read host mount table: %w", err)
	}
	a.obs.SnapshotTaken(snap.Entries(), time.Since(t))
	return snap, nil
}

// resolvePV maps a claim to its PV through the API, cached per VMI: a
// bound claim's volumeName never changes.
func (a *Agent) resolvePV(st *vmiState) pvResolver {
	return func(ctx context.Context, ns, claim string) (string, error) {
		if pv, ok := st.pvByClaim[claim]; ok {
			return pv, nil
		}
		if claim == "" {
			return "", errors.New("volume names no claim")
		}
		ctx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		pvc, err := a.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get persistentvolumeclaim %s/%s: %w", ns, claim, err)
		}
		if pvc.Spec.VolumeName == "" {
			return "", fmt.Errorf("persistentvolumeclaim %s/%s is not bound", ns, claim)
		}
		st.pvByClaim[claim] = pvc.Spec.VolumeName
		return pvc.Spec.VolumeName, nil
	}
}

// pruneState drops remembered data of volumes that left the VMI.
func (a *Agent) pruneState(st *vmiState, vmi *VMI) {
	claims := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		if c, ok := v.Hotpluggable(); ok {
			claims[c] = true
		}
	}
	for c := range st.pvByClaim {
		if !claims[c] {
			delete(st.pvByClaim, c)
		}
	}
	for name := range st.capacity {
		if !vmi.Spec.HasVolume(name) {
			delete(st.capacity, name)
		}
	}
}

// reportPending marks every hotplug volume pending when there is no
// launcher to attach to.
func (a *Agent) reportPending(vmi *VMI) {
	for _, v := range vmi.Spec.Volumes {
		if _, ok := v.Hotpluggable(); ok {
			a.obs.VolumeState(vmi.Namespace, vmi.Name, v.Name, string(vmi.Status.VolumeStatusByName(v.Name).mode()), StatePending)
		}
	}
}

func (s *VolumeStatus) mode() VolumeMode {
	if s == nil {
		return Filesystem
	}
	return s.PersistentVolumeClaimInfo.Mode()
}
