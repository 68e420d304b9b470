package agent

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// statusWriter carries volumeStatus updates to the API off the reconcile
// path: a slow or rate-limited API server delays the status, never the
// mounts of other VMIs. The newest update of a volume wins.
type statusWriter struct {
	mu      sync.Mutex
	pending map[string]map[string]statusUpdate // VMI key → volume → update
	queue   workqueue.TypedRateLimitingInterface[string]
}

func newStatusWriter(m workqueue.MetricsProvider) *statusWriter {
	return &statusWriter{
		pending: map[string]map[string]statusUpdate{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "hpmount-status", MetricsProvider: m}),
	}
}

// add merges updates for key; older pending updates of the same volumes
// are replaced.
func (w *statusWriter) add(key string, updates map[string]statusUpdate) {
	w.merge(key, updates, true)
	w.queue.Add(key)
}

// merge adds updates to what is pending for key; replace says whether an
// update replaces a pending one of the same volume.
func (w *statusWriter) merge(key string, updates map[string]statusUpdate, replace bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending[key]
	if p == nil {
		p = map[string]statusUpdate{}
		w.pending[key] = p
	}
	for name, u := range updates {
		if _, pending := p[name]; replace || !pending {
			p[name] = u
		}
	}
}

// take removes and returns what is pending for key.
func (w *statusWriter) take(key string) map[string]statusUpdate {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending[key]
	delete(w.pending, key)
	return p
}

// giveBack returns updates that failed to be written, unless a newer one of
// the same volume arrived meanwhile.
func (w *statusWriter) giveBack(key string, updates map[string]statusUpdate) {
	w.merge(key, updates, false)
}

// statusWorker writes queued updates until the queue shuts down.
func (a *Agent) statusWorker(ctx context.Context) {
	for {
		key, quit := a.status.queue.Get()
		if quit {
			return
		}
		if err := a.writeStatus(ctx, key); err != nil && ctx.Err() == nil {
			a.log.Warn("cannot report volume status, retrying", "vmi", key, "error", err.Error())
			a.status.queue.AddRateLimited(key)
		} else {
			a.status.queue.Forget(key)
		}
		a.status.queue.Done(key)
	}
}

// writeStatus patches what is pending for key onto the VMI, starting from
// the cached object. A VMI gone from the cache needs no status.
func (a *Agent) writeStatus(ctx context.Context, key string) error {
	updates := a.status.take(key)
	if len(updates) == 0 {
		return nil
	}
	u, exists, err := a.cachedVMI(key)
	if err != nil || !exists {
		return err
	}
	if err := a.patchVolumeStatus(ctx, u, updates); err != nil {
		a.status.giveBack(key, updates)
		return err
	}
	return nil
}
