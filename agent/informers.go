package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
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
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
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
	for _, c := range vmi.Spec.HotplugClaims() {
		keys = append(keys, vmi.Namespace+"/"+c.Claim)
	}
	return keys, nil
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
	claims := a.kube.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll)
	a.podInformer = a.newInformer("pods", &corev1.Pod{}, a.kube, listWatch(pods.List, pods.Watch, podsOfNode))
	a.vmiInformer = a.newInformer("vmis", &unstructured.Unstructured{}, a.dyn, listWatch(vmis.List, vmis.Watch, vmisOfNode))
	a.claimInformer = a.newInformer("claims", &corev1.PersistentVolumeClaim{}, a.kube,
		listWatch(claims.List, claims.Watch, func(*metav1.ListOptions) {}))
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
	return a.addEventHandlers()
}

// addEventHandlers turns changes of VMIs, pods and claims into queued
// VMI keys.
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
	if _, err := a.claimInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueueClaim,
		UpdateFunc: func(_, obj any) { a.enqueueClaim(obj) },
		DeleteFunc: a.enqueueClaim,
	}); err != nil {
		return fmt.Errorf("add claim event handler: %w", err)
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

// Why informers wait for the API server through a gate (issue #10).
//
// client-go's reflector sleeps between failed lists and watches on a
// backoff of its own: 800 ms doubling per failure up to 30 s, each sleep
// jittered to up to twice that, reset only every 2 minutes, and not
// settable through an informer (kubernetes/kubernetes#136943). While the
// server is down every watch fails with connection refused, so within a
// minute each informer sleeps 30-60 s between attempts, and a server that
// comes back meanwhile is noticed only when the sleep ends. That first
// watch then finds its resource version compacted away (410: etcd moved
// on while the server was down), which ends ListAndWatch and costs one
// more sleep of the same length before the relist. Measured with
// client-go's own log on a 60 s outage (TestAPIOutage): the VMI watch
// retried 4, 8, 21 and 46 s into the outage, next 26 s after the server
// was back, got the 410, and had not relisted 60 s after the server was
// back; the pods informer relisted after 55 s.
//
// patientLW keeps connection failures from the reflector: the failed call
// waits on apiGate, which probes /readyz about once a second for every
// informer together, and is retried as soon as the server answers. The
// reflector's backoff stays at its first steps, so the 410 costs 0.8-1.6
// s: the same test relists VMIs 1 s after the server is ready, and mounts
// a hotplug written then 1.1 s after it was written.

// apiProbeInterval is the pause between probes of an unreachable server:
// short enough that a hotplug after an outage waits at most a few
// seconds, one cheap request per second per node while the server is down.
const apiProbeInterval = time.Second

// patientLW is a ListerWatcher whose list and watch calls, when the API
// server cannot be reached, wait for the gate and try again, instead of
// returning an error the reflector would back off on. Any other error, and
// the end of ctx, go to the reflector as they are.
type patientLW struct {
	cache.ListerWatcher
	gate *apiGate
}

func (l *patientLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	for {
		obj, err := cache.ToListerWatcherWithContext(l.ListerWatcher).ListWithContext(ctx, o)
		if !l.retry(ctx, err) {
			return obj, err
		}
	}
}

func (l *patientLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	for {
		w, err := cache.ToListerWatcherWithContext(l.ListerWatcher).WatchWithContext(ctx, o)
		if !l.retry(ctx, err) {
			return w, err
		}
	}
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says,
// so the reflector streams its lists exactly when client-go's own
// informers would.
func (l *patientLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.ListerWatcher)
}

// retry reports whether err means the server could not be reached and,
// if so, waits until it is ready again.
func (l *patientLW) retry(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !unreachable(err) {
		return false
	}
	return l.gate.wait(ctx, err) == nil
}

// unreachable reports whether err says the API server could not be
// reached or is not serving at all, rather than answering this request.
func unreachable(err error) bool {
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		apierrors.IsServiceUnavailable(err)
}

// apiGate tells callers when an unreachable API server is ready again.
// One round of probes runs at a time, whoever waits on it.
type apiGate struct {
	// probe is nil once the server answers /readyz with ok.
	probe func(context.Context) error
	log   *slog.Logger

	mu    sync.Mutex
	round *gateRound // the probing under way; nil when none is
	// warned is when the last round was logged: an outage is logged once
	// and a server that refuses every few seconds once a minute.
	warned time.Time
}

// gateRound is one probing of the server until it is ready.
type gateRound struct {
	done   chan struct{}
	ready  bool // valid once done is closed
	logged bool
}

// wait returns nil once the server answered a probe made at least one
// probe interval after the first waiter of this round failed, or ctx's
// error. cause is the failure that made the caller wait.
func (g *apiGate) wait(ctx context.Context, cause error) error {
	g.mu.Lock()
	r := g.round
	if r == nil {
		r = &gateRound{done: make(chan struct{})}
		if time.Since(g.warned) > time.Minute {
			g.warned, r.logged = time.Now(), true
			g.log.Warn("API server unreachable; informers wait until it is ready, mounts stay as they are",
				"error", cause.Error())
		}
		g.round = r
		go g.probeUntilReady(ctx, r)
	}
	g.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		if !r.ready {
			return errors.New("stopped waiting for the API server")
		}
		return nil
	}
}

// probeUntilReady probes the server about once a second until it is ready
// or ctx ends, then releases the round's waiters.
func (g *apiGate) probeUntilReady(ctx context.Context, r *gateRound) {
	began := time.Now()
	defer func() {
		g.mu.Lock()
		g.round = nil
		g.mu.Unlock()
		close(r.done)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait.Jitter(apiProbeInterval, 0.5)):
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := g.probe(pctx)
		cancel()
		if err == nil {
			r.ready = true
			if r.logged {
				g.log.Info("API server ready again; informers resume", "waited", time.Since(began).Round(time.Millisecond).String())
			}
			return
		}
	}
}

// probeAPI is nil when the API server's /readyz answers ok, or when the
// server answers but will not tell this agent (401, 403): it is up, and
// waiting for a probe it cannot use would stop the informers for good.
// A starting server may answer so for a second before its authorizer has
// synced, opening the gate early; what fails then goes to the reflector
// while its backoff is still short.
func (a *Agent) probeAPI(ctx context.Context) error {
	rc := a.kube.Discovery().RESTClient()
	if rc == nil { // fake clients in unit tests have none
		return nil
	}
	err := rc.Get().AbsPath("/readyz").Do(ctx).Error()
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return nil
	}
	return err
}
