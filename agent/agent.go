// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// Agent runs the reconcile loop of one node.
type Agent struct {
	cfg    Config
	kube   kubernetes.Interface
	dyn    dynamic.Interface
	engine Engine
	log    *slog.Logger
	obs    Observer

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	// gate holds lists and watches back while the API server is
	// unreachable (gate.go says why).
	gate        *apiGate
	podInformer cache.SharedIndexInformer
	vmiInformer cache.SharedIndexInformer
	// vmiTargetInformer holds the VMIs whose live migration targets this
	// node (migration.go).
	vmiTargetInformer cache.SharedIndexInformer
	// claims holds the PVs of the claims the node's VMIs name (claims.go).
	claims *claimCache
	queue  workqueue.TypedRateLimitingInterface[string]
	// sweeps is the orphan sweep's own queue (orphans.go).
	sweeps workqueue.TypedRateLimitingInterface[string]
	// status writes volumeStatus off the reconcile path.
	status *statusWriter
	// growth runs growth checks off the reconcile workers (growth.go).
	growth *growRunner
	// snaps shares mount-table reads between reconciles.
	snaps snapshots

	// synced is set once both informer caches synced; before that no
	// absence from a cache means anything.
	synced atomic.Bool

	mu     sync.Mutex
	states map[string]*vmiState // by VMI key ns/name
	// lastUnparsed is the last unparsable mountinfo line reported.
	lastUnparsed string
	// arrived holds, per key, when the oldest VMI change not yet
	// reconciled arrived: the start of the attach latency.
	arrived map[string]time.Time
	resync  map[string]bool // keys due for a periodic pass
	// rulesDue are keys whose launcher's device rules were rewritten:
	// their next pass verifies every block volume (rules.go).
	rulesDue map[string]bool
}

// vmiState is what the agent remembers about one VMI key. Only the worker
// that holds the key (the queue guarantees one) touches it: a pass decides
// on a copy, and report stores the copy as it ends the pass.
type vmiState struct {
	uid types.UID
	// launchers are launcher pod UIDs this agent saw for the VMI and may
	// have mounted into; one is dropped once it is cleaned.
	launchers map[types.UID]bool
	// capacity is the PVC capacity of the last growth check, per volume.
	capacity map[string]int64
	// busy counts, per volume, the growth checks in a row that had to
	// wait (ErrBusy), so that one that keeps waiting is told once.
	busy map[string]int
	// warned holds the last Warning message per volume and reason, so a
	// resync does not repeat an unchanged warning.
	warned map[string]string
	// wanted holds, per volume not yet usable, when the VMI change that
	// made it desired arrived.
	wanted map[string]time.Time
	// attach holds, per volume whose attach phases are being measured,
	// the times seen after the start (summarize_latency.go): until the
	// launcher reports the volume Ready.
	attach map[string]attachTimes
	// migration is this node's part in the VMI's last live migration.
	migration migrationState
	// compute is the launcher and compute container of the last pass: a
	// restarted compute container is a new cgroup without the block
	// volumes' device rules, so a change verifies them at once (the first
	// pass after the agent starts leaves that to the periodic resync).
	compute string
}

// New builds an agent. Nothing runs until Run.
func New(cfg Config, kube kubernetes.Interface, dyn dynamic.Interface, engine Engine) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if kube == nil || dyn == nil || engine == nil {
		return nil, errors.New("agent: kubernetes client, dynamic client and engine are required")
	}
	a := &Agent{
		cfg:      cfg,
		kube:     kube,
		dyn:      dyn,
		engine:   engine,
		log:      cfg.Logger,
		obs:      cfg.Observer,
		states:   map[string]*vmiState{},
		resync:   map[string]bool{},
		rulesDue: map[string]bool{},
		arrived:  map[string]time.Time{},
		status:   newStatusWriter(cfg.QueueMetrics),
		growth:   newGrowRunner(),
	}
	if a.log == nil {
		a.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if a.obs == nil {
		a.obs = NopObserver{}
	}
	a.gate = &apiGate{probe: a.probeAPI, log: a.log}
	a.broadcaster = record.NewBroadcaster()
	a.recorder = a.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hpmount", Host: cfg.NodeName})
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "hpmount", MetricsProvider: cfg.QueueMetrics},
	)
	a.sweeps = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	if err := a.setupInformers(); err != nil {
		return nil, err
	}
	return a, nil
}

// Run starts informers, workers, the resync loop and the health and
// metrics servers, and blocks until ctx is done. It leaves every mount in
// place on return.
func (a *Agent) Run(ctx context.Context) error {
	events := a.cfg.EventClient
	if events == nil {
		events = a.kube
	}
	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	defer a.broadcaster.Shutdown()
	defer a.status.queue.ShutDown()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srvErr := make(chan error, 2)
	stopServers, err := a.startServers(ctx, srvErr)
	if err != nil {
		a.queue.ShutDown()
		a.sweeps.ShutDown()
		return err
	}
	defer stopServers()

	var informers sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{a.podInformer, a.vmiInformer, a.vmiTargetInformer} {
		informers.Go(func() { inf.RunWithContext(ctx) })
	}
	defer informers.Wait()
	defer cancel() // runs first: informers stop before the wait

	a.log.Info("waiting for informer caches", "node", a.cfg.NodeName)
	// Told when the lists are in, not polled: WaitForCacheSync looks every
	// 100 ms, and a node's lists took 200 to 300 ms, so a cold start's
	// workers waited up to a tenth of a second more for nothing.
	if !cache.WaitFor(ctx, "", a.podInformer.HasSyncedChecker(), a.vmiInformer.HasSyncedChecker(), a.vmiTargetInformer.HasSyncedChecker()) {
		a.queue.ShutDown()
		a.sweeps.ShutDown()
		select {
		case err := <-srvErr:
			return err
		default:
		}
		return nil
	}
	a.synced.Store(true)
	a.sweeps.Add(orphanSweepKey)
	a.log.Info("informer caches synced, starting workers", "workers", a.cfg.Workers)

	var wg sync.WaitGroup
	for range a.cfg.Workers {
		wg.Go(func() { a.worker(ctx) })
	}
	wg.Go(func() { a.sweepLoop(ctx) })
	wg.Go(func() { a.resyncLoop(ctx) })
	wg.Go(func() { a.watchMounts(ctx) })
	wg.Go(func() { a.watchRules(ctx) })
	wg.Go(func() { a.statusWorker(ctx) })
	// Not waited for: a growth check blocked on a frozen filesystem ends
	// only at the engine's growth deadline, and shutting down must not
	// wait minutes for it. It writes nothing but its own result.
	go a.growthLoop(ctx)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-srvErr:
		cancel()
	}
	a.queue.ShutDown()
	a.sweeps.ShutDown()
	a.status.queue.ShutDown()
	wg.Wait()
	a.log.Info("agent stopped; mounts left in place")
	return runErr
}

func (a *Agent) worker(ctx context.Context) {
	for {
		key, quit := a.queue.Get()
		if quit {
			return
		}
		a.process(ctx, key)
		a.noteQueueIdle()
	}
}

// noteQueueIdle tells waiting growth checks when a pass left the queue
// empty (growth.go).
func (a *Agent) noteQueueIdle() {
	if a.queue.Len() == 0 {
		a.growth.queueIdle()
	}
}

func (a *Agent) process(ctx context.Context, key string) {
	defer a.queue.Done(key)
	if ctx.Err() != nil {
		return
	}
	err := a.reconcile(ctx, key)
	if err == nil {
		a.queue.Forget(key)
		return
	}
	if ctx.Err() != nil {
		return
	}
	a.log.Warn("reconcile failed, retrying", "vmi", key, "error", err.Error(), "retries", a.queue.NumRequeues(key))
	a.queue.AddRateLimited(key)
}

// noteArrival records when a change of key arrived, keeping the oldest one
// not yet reconciled.
func (a *Agent) noteArrival(key string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.arrived[key]; !ok {
		a.arrived[key] = t
	}
}
