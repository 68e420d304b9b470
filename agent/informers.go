package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/hpmount/hpmount/kubevirt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
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

// TrimClaim is the claim informer's transform: the agent reads only a
// claim's identity and spec.volumeName, and a node watches every claim of
// the cluster, so everything else is dropped before it is cached.
func TrimClaim(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pvc.Spec.VolumeName},
	}, nil
}

// indexByClaim keys a VMI by namespace/claim of each hotplug volume, so a
// claim that becomes bound wakes the VMIs waiting for it.
func indexByClaim(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	vmi, err := kubevirt.DecodeVMI(u)
	if err != nil {
		return nil, nil // reconcile reports it
	}
	var keys []string
	for _, v := range vmi.Spec.Volumes {
		if claim, ok := v.Hotpluggable(); ok {
			keys = append(keys, vmi.Namespace+"/"+claim)
		}
	}
	return keys, nil
}

func (a *Agent) setupInformers() error {
	node := a.cfg.NodeName
	a.podFactory = informers.NewSharedInformerFactoryWithOptions(a.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	a.vmiFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(a.dyn, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{kubevirt.LabelNodeName: node}).String()
		})
	a.claimFactory = informers.NewSharedInformerFactory(a.kube, 0)
	a.podInformer = a.podFactory.Core().V1().Pods().Informer()
	a.vmiInformer = a.vmiFactory.ForResource(kubevirt.VMIResource).Informer()
	a.claimInformer = a.claimFactory.Core().V1().PersistentVolumeClaims().Informer()
	if err := a.claimInformer.SetTransform(TrimClaim); err != nil {
		return fmt.Errorf("set transform on claim informer: %w", err)
	}
	if err := a.vmiInformer.AddIndexers(cache.Indexers{claimIndex: indexByClaim}); err != nil {
		return fmt.Errorf("add claim index to vmi informer: %w", err)
	}
	transforms := map[string]cache.TransformFunc{"pods": TrimPod, "vmis": TrimVMI}
	for name, inf := range map[string]cache.SharedIndexInformer{"pods": a.podInformer, "vmis": a.vmiInformer} {
		if err := inf.SetTransform(transforms[name]); err != nil {
			return fmt.Errorf("set transform on %s informer: %w", name, err)
		}
		if err := inf.AddIndexers(cache.Indexers{uidIndex: indexByUID}); err != nil {
			return fmt.Errorf("add uid index to %s informer: %w", name, err)
		}
	}
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
	if _, err := a.claimInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueueClaim,
		UpdateFunc: func(_, obj any) { a.enqueueClaim(obj) },
		DeleteFunc: a.enqueueClaim,
	}); err != nil {
		return fmt.Errorf("add claim event handler: %w", err)
	}
	return nil
}

// enqueueClaim wakes the VMIs of this node that use the claim.
func (a *Agent) enqueueClaim(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	objs, err := a.vmiInformer.GetIndexer().ByIndex(claimIndex, key)
	if err != nil {
		return
	}
	for _, o := range objs {
		a.enqueueObject(o)
	}
}

// ClaimVolume returns the PV bound to namespace/claim from the claim cache.
func (a *Agent) ClaimVolume(namespace, claim string) (string, error) {
	obj, ok, err := a.claimInformer.GetIndexer().GetByKey(namespace + "/" + claim)
	switch {
	case err != nil:
		return "", fmt.Errorf("read persistentvolumeclaim %s/%s from the cache: %w", namespace, claim, err)
	case !ok:
		return "", fmt.Errorf("persistentvolumeclaim %s/%s not found", namespace, claim)
	}
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentvolumeclaim %s/%s is not bound", namespace, claim)
	}
	return pvc.Spec.VolumeName, nil
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

// cachedVMI returns the VMI of key from the informer cache.
func (a *Agent) cachedVMI(key string) (*unstructured.Unstructured, bool, error) {
	obj, exists, err := a.vmiInformer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, false, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, false, fmt.Errorf("vmi cache holds %T for %q", obj, key)
	}
	return u, true, nil
}

// resyncLoop enqueues every VMI of the node, and every key still being
// cleaned, once per resync period.
func (a *Agent) resyncLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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
	a.queue.Add(orphanSweepKey)
}
