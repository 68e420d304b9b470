// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hpmount/hpmount/kubevirt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

const (
	uidIndex   = "uid"
	claimIndex = "claim" // VMIs by namespace/claim of each hotplug volume
)

func indexByUID(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("index by uid: %w", err)
	}
	return []string{string(m.GetUID())}, nil
}

// indexByClaim keys a VMI by namespace/claim of each hotplug volume: a
// claim no VMI of the node names is dropped from the claim cache.
func indexByClaim(obj any) ([]string, error) {
	vmi, err := decodeCached(obj)
	if err != nil {
		return nil, nil // reconcile reports it
	}
	var keys []string
	for _, c := range vmi.Spec.HotplugClaims() {
		claim := c.Claim
		if st := vmi.Status.VolumeStatusByName(c.Name); claim == "" && st != nil && st.PersistentVolumeClaimInfo != nil {
			claim = st.PersistentVolumeClaimInfo.ClaimName
		}
		keys = append(keys, vmi.Namespace+"/"+claim)
	}
	return keys, nil
}

// decodeCached returns the decoded VMI of a VMI cache's object.
func decodeCached(obj any) (*kubevirt.VMI, error) {
	r, ok := obj.(*vmiRecord)
	if !ok {
		return nil, fmt.Errorf("vmi cache holds %T", obj)
	}
	return r.vmi, r.decodeErr
}

func (a *Agent) setupInformers() error {
	node := a.cfg.NodeName
	podsOfNode := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	vmisOfNode := func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{kubevirt.LabelNodeName: node}).String()
	}
	pods := a.kube.CoreV1().Pods(metav1.NamespaceAll)
	vmis := a.dyn.Resource(kubevirt.VMIResource).Namespace(metav1.NamespaceAll)
	a.podInformer = a.newInformer("pods", &corev1.Pod{}, a.kube, listWatch(pods.List, pods.Watch, podsOfNode))
	a.vmiInformer = a.newInformer("vmis", &unstructured.Unstructured{}, a.dyn, listWatch(vmis.List, vmis.Watch, vmisOfNode))
	a.claims = newClaimCache(a.kube)
	transforms := map[string]cache.TransformFunc{"pods": TrimPod, "vmis": RecordVMI}
	for name, inf := range map[string]cache.SharedIndexInformer{"pods": a.podInformer, "vmis": a.vmiInformer} {
		if err := inf.SetTransform(transforms[name]); err != nil {
			return fmt.Errorf("set transform on %s informer: %w", name, err)
		}
		if err := inf.AddIndexers(cache.Indexers{uidIndex: indexByUID}); err != nil {
			return fmt.Errorf("add uid index to %s informer: %w", name, err)
		}
	}
	if err := a.vmiInformer.AddIndexers(cache.Indexers{claimIndex: indexByClaim}); err != nil {
		return fmt.Errorf("add claim index to vmi informer: %w", err)
	}
	if err := a.setupTargetInformer(); err != nil {
		return err
	}
	return a.addEventHandlers()
}

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
	if err := inf.SetTransform(RecordVMI); err != nil {
		return fmt.Errorf("set transform on migration target vmi informer: %w", err)
	}
	if err := inf.AddIndexers(cache.Indexers{uidIndex: indexByUID, claimIndex: indexByClaim}); err != nil {
		return fmt.Errorf("add indexes to migration target vmi informer: %w", err)
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

// addEventHandlers turns changes of VMIs and pods into queued VMI keys.
// Claims have no informer (claims.go says what wakes a VMI instead).
func (a *Agent) addEventHandlers() error {
	if _, err := a.vmiInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.vmiChanged,
		UpdateFunc: func(_, obj any) { a.vmiChanged(obj) },
		DeleteFunc: a.enqueueObject,
	}); err != nil {
		return fmt.Errorf("add vmi event handler: %w", err)
	}
	if _, err := a.podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueuePod,
		UpdateFunc: func(_, obj any) { a.enqueuePod(obj) },
		DeleteFunc: a.enqueuePod,
	}); err != nil {
		return fmt.Errorf("add pod event handler: %w", err)
	}
	return nil
}

// listWatch makes the list and watch calls of an informer from a
// client's, with tweak applied to every request's options.
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), tweak func(*metav1.ListOptions)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchFn(ctx, o)
		},
	}
}

// newInformer builds the informer of one resource on lw, whose lists and
// watches wait out an unreachable API server (patientLW) instead of
// feeding the reflector's backoff; client tells whether the client
// behind lw supports WatchList, as client-go's own informers ask it.
func (a *Agent) newInformer(name string, example runtime.Object, client any, lw *cache.ListWatch) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(
		&patientLW{ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, client), gate: a.gate},
		example,
		cache.SharedIndexInformerOptions{
			Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			ObjectDescription: name,
		})
	// Cannot fail before the informer runs.
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		a.watchFailed(name, err)
	})
	return inf
}

// watchFailed logs a list or watch that failed in a way the informer
// handles by listing again after a backoff: a compacted resource version
// after an outage (routine), anything else (worth a look).
func (a *Agent) watchFailed(informer string, err error) {
	if errors.Is(err, io.EOF) {
		return
	}
	level := slog.LevelWarn
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		level = slog.LevelInfo
	}
	a.log.Log(context.Background(), level, "list or watch failed; the informer lists again after a backoff",
		"informer", informer, "error", err.Error())
}

func (a *Agent) enqueueObject(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		a.log.Warn("cannot key object", "error", err.Error())
		return
	}
	a.queue.Add(key)
}

// vmiChanged notes when a VMI change arrived, for the attach latency, and
// enqueues the VMI.
func (a *Agent) vmiChanged(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		a.noteArrival(key, time.Now())
	}
	a.enqueueObject(obj)
}

func (a *Agent) enqueuePod(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, key := range a.vmiKeysForPod(pod) {
		a.queue.Add(key)
	}
}

// vmiKeysForPod maps a launcher or attachment pod to its VMI's key.
func (a *Agent) vmiKeysForPod(pod *corev1.Pod) []string {
	switch pod.Labels[kubevirt.LabelApp] {
	case kubevirt.AppVirtLauncher:
		if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == kubevirt.VMIKind {
			return []string{pod.Namespace + "/" + owner.Name}
		}
		if uid := pod.Labels[kubevirt.LabelCreatedBy]; uid != "" {
			if key, ok := a.vmiKeyByUID(types.UID(uid)); ok {
				return []string{key}
			}
		}
	case kubevirt.AppHotplugDisk:
		owner := metav1.GetControllerOf(pod)
		if owner == nil {
			return nil
		}
		if launcher, ok := a.PodByUID(owner.UID); ok && launcher.Labels[kubevirt.LabelApp] == kubevirt.AppVirtLauncher {
			return a.vmiKeysForPod(launcher)
		}
	}
	return nil
}

func (a *Agent) vmiKeyByUID(uid types.UID) (string, bool) {
	objs, err := a.vmiInformer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return "", false
	}
	key, err := cache.MetaNamespaceKeyFunc(objs[0])
	return key, err == nil
}

// PodByUID returns a pod of this node from the informer cache.
func (a *Agent) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	objs, err := a.podInformer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	pod, ok := objs[0].(*corev1.Pod)
	return pod, ok
}

// cachedVMI returns the record of key from the node's VMI cache.
func (a *Agent) cachedVMI(key string) (*vmiRecord, bool, error) {
	return cachedRecord(a.vmiInformer, key)
}

// cachedRecord returns the record of key from a VMI cache.
func cachedRecord(inf cache.SharedIndexInformer, key string) (*vmiRecord, bool, error) {
	obj, exists, err := inf.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, false, err
	}
	r, ok := obj.(*vmiRecord)
	if !ok {
		return nil, false, fmt.Errorf("vmi cache holds %T for %q", obj, key)
	}
	return r, true, nil
}

// resyncLoop enqueues every VMI of the node, and every key still being
// cleaned, once per resync period, and drops the claims the node no
// longer uses.
func (a *Agent) resyncLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.pruneClaims()
			a.enqueueAll()
		}
	}
}

func (a *Agent) enqueueAll() {
	keys := a.vmiInformer.GetIndexer().ListKeys()
	a.mu.Lock()
	for k := range a.states {
		keys = append(keys, k)
	}
	for _, k := range keys {
		a.resync[k] = true
	}
	a.mu.Unlock()
	for _, k := range keys {
		a.queue.Add(k)
	}
	a.sweeps.Add(orphanSweepKey)
}
