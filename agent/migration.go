package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
)

// Event reasons of live migrations and of the launcher choice.
const (
	EventLauncherChosen         = "LauncherChosen"
	EventMigrationTargetReady   = "MigrationTargetReady"
	EventMigrationTargetCleaned = "MigrationTargetCleaned"
	EventMigrationSourceCleaned = "MigrationSourceCleaned"
)

// Why the agent watches a second set of VMIs.
//
// A VMI is labelled kubevirt.io/nodeName with its source node until the
// handoff of a live migration completes; the target node learns about it
// only from kubevirt.io/migrationTargetNodeName, which virt-controller sets
// at the handoff, when the target launcher is ready. virt-handler watches
// both labels for the same reason. The target informer is scoped and
// trimmed exactly like the node's own, and reconcile reads a VMI from
// whichever cache holds it (lookupVMI). A pod change finds a target VMI
// through its launcher's owner reference; anything else a target VMI
// waits for is picked up by the VMI's own changes and by the resync of
// the keys the agent remembers.

// setupTargetInformer builds the informer of VMIs whose migration targets
// this node.
func (a *Agent) setupTargetInformer() error {
	vmis := a.dyn.Resource(kubevirt.VMIResource).Namespace(metav1.NamespaceAll)
	sel := labels.SelectorFromSet(labels.Set{kubevirt.LabelMigrationTargetNode: a.cfg.NodeName}).String()
	a.vmiTargetInformer = a.newInformer("migration-target-vmis", &unstructured.Unstructured{}, a.dyn, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return vmis.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return vmis.Watch(ctx, o)
		},
	})
	inf := a.vmiTargetInformer
	if err := inf.SetTransform(TrimVMI); err != nil {
		return fmt.Errorf("set transform on migration target vmi informer: %w", err)
	}
	if err := inf.AddIndexers(cache.Indexers{uidIndex: indexByUID}); err != nil {
		return fmt.Errorf("add uid index to migration target vmi informer: %w", err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.vmiChanged,
		UpdateFunc: func(_, obj any) { a.vmiChanged(obj) },
		DeleteFunc: a.enqueueObject,
	}); err != nil {
		return fmt.Errorf("add migration target vmi event handler: %w", err)
	}
	return nil
}

// lookupVMI returns the VMI of key from the node's own cache or, failing
// that, from the migration target cache: after the handoff completes both
// hold it, and the node's own is read.
func (a *Agent) lookupVMI(key string) (*unstructured.Unstructured, bool, error) {
	u, ok, err := a.cachedVMI(key)
	if ok || err != nil {
		return u, ok, err
	}
	obj, exists, err := a.vmiTargetInformer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, false, err
	}
	if u, ok = obj.(*unstructured.Unstructured); !ok {
		return nil, false, fmt.Errorf("migration target vmi cache holds %T for %q", obj, key)
	}
	return u, true, nil
}

// migrationState is what the agent remembers of a VMI's migration.
type migrationState struct {
	kubevirt.Migration
	// handoff is when this agent first saw the handoff to this node.
	handoff time.Time
	// ready and cleaned: the migration's Event was sent.
	ready, cleaned bool
}

// noteMigration remembers node's part in the VMI's migration, and reports
// a handoff to this node the first time it is seen.
func (a *Agent) noteMigration(st *vmiState, log *slog.Logger, m kubevirt.Migration) {
	if m.UID != st.migration.UID {
		st.migration = migrationState{Migration: m}
		if m.Role == kubevirt.RoleTarget && m.Phase == kubevirt.MigrationRunning {
			st.migration.handoff = time.Now()
			a.obs.Migration(MigrationHandoff, 0)
			log.Info("migration handed off to this node", "migration", string(m.UID), "source", m.SourceNode, "targetPod", m.TargetPod)
		}
		return
	}
	st.migration.Migration = m
}

// targetSide reports whether launcher is the target launcher of a
// migration still running: virt-handler on the source owns the VMI's
// volumeStatus until the handoff completes, so the target writes none.
func targetSide(vmi *kubevirt.VMI, m kubevirt.Migration, launcher *corev1.Pod) bool {
	return m.Role == kubevirt.RoleTarget && m.Phase == kubevirt.MigrationRunning && m.IsTargetLauncher(vmi, launcher)
}

// reportTargetReady sends MigrationTargetReady once per migration, when
// every hotplug volume of the target launcher is usable.
func (a *Agent) reportTargetReady(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, launcher *corev1.Pod, s summary, intents int) {
	m := &st.migration
	if m.ready || m.handoff.IsZero() || intents == 0 {
		return
	}
	mounted := 0
	for _, v := range s.Volumes {
		if v.State == StateMounted {
			mounted++
		}
	}
	if mounted < intents {
		return
	}
	m.ready = true
	took := time.Since(m.handoff)
	a.obs.Migration(MigrationTargetReady, took)
	a.emit(st, ref, log, event{Type: corev1.EventTypeNormal, Reason: EventMigrationTargetReady,
		Message: fmt.Sprintf("All %d hotplug volumes are mounted in migration target virt-launcher pod %s, %s after the handoff of migration %s was seen",
			intents, launcher.Name, took.Round(time.Millisecond), m.UID)})
}

// abandonedLaunchers lists the launchers that must hold nothing because
// their migration failed or was aborted: those the ownership rules found
// among the active pods, and those this agent mounted into that are the
// migration's target launcher, whether or not still listed.
func (a *Agent) abandonedLaunchers(st *vmiState, vmi *kubevirt.VMI, c kubevirt.LauncherChoice) []types.UID {
	var out []types.UID
	for _, p := range c.Abandoned {
		out = append(out, p.UID)
	}
	for _, uid := range slices.Sorted(maps.Keys(st.launchers)) {
		if pod, ok := a.PodByUID(uid); ok && c.Migration.Abandons(vmi, pod) && !slices.Contains(out, uid) {
			out = append(out, uid)
		}
	}
	return out
}

// reportTargetCleaned sends MigrationTargetCleaned once per migration,
// after the abandoned target launchers were cleaned without error.
func (a *Agent) reportTargetCleaned(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, abandoned []types.UID) {
	m := &st.migration
	if m.cleaned || len(abandoned) == 0 {
		return
	}
	for _, uid := range abandoned {
		if st.launchers[uid] {
			return // not clean yet
		}
	}
	m.cleaned = true
	a.obs.Migration(MigrationTargetCleaned, 0)
	a.emit(st, ref, log, event{Type: corev1.EventTypeNormal, Reason: EventMigrationTargetCleaned,
		Message: fmt.Sprintf("Migration %s %s: its target virt-launcher pod on node %s holds nothing of the VMI's hotplug volumes",
			m.UID, m.Phase, m.TargetNode)})
}

// heldForHandoff splits the launchers of a VMI that left this node's
// caches. After the VMI left for its migration target, the source
// launcher's QEMU hands over until the pod stops, so its mounts stay
// until it is gone or terminated; a VMI that left any other way (deleted,
// or its migration to this node failed) is cleaned at once.
func (a *Agent) heldForHandoff(st *vmiState) (clean, held []types.UID) {
	uids := slices.Sorted(maps.Keys(st.launchers))
	m := st.migration
	if m.Role != kubevirt.RoleSource || m.Ended() {
		return uids, nil
	}
	for _, uid := range uids {
		if pod, ok := a.PodByUID(uid); ok && !kubevirt.PodTerminated(pod) {
			held = append(held, uid)
			continue
		}
		clean = append(clean, uid)
	}
	return clean, held
}
