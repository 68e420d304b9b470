// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The agent's own attaches and detaches are reported too, so each of its
// changing passes is followed by one pass that finds nothing to do and
// changes nothing. A fight with another mounter (one that stacks again at
// once what the agent peeled) would loop at the speed of events; each VMI
// therefore has a bucket of mountEventBurst passes, refilled one per
// mountEventRefill, and an event that finds it empty enqueues the VMI for
// when the next pass is due, once. An occasional foreign change is
// repaired at once; a fight costs at most four passes a second per VMI.
const (
	mountEventBurst  = 8
	mountEventRefill = 250 * time.Millisecond
)

// watchMounts runs the engine's mount watcher, if it has one, until ctx
// ends. The resync stays the safety net: a watcher that is unsupported or
// stops costs only the speed of repairs.
func (a *Agent) watchMounts(ctx context.Context) {
	w, ok := a.engine.(MountWatcher)
	if !ok {
		return
	}
	h := &mountHolds{}
	err := w.WatchMounts(ctx, func(c MountChange) { a.mountsChanged(h, c, time.Now()) })
	a.watchEnded(ctx, err, "the node reports no mount changes", "mount change reports stopped",
		"foreign changes to targets are repaired at the next resync")
}

// watchEnded logs why one of the node's watchers returned before ctx
// ended: unsupported (Info) or stopped (Warn), each followed by what the
// resync still does in its stead.
func (a *Agent) watchEnded(ctx context.Context, err error, unsupported, stopped, meanwhile string) {
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, errors.ErrUnsupported):
		a.log.Info(unsupported+"; "+meanwhile, "resyncPeriod", a.cfg.ResyncPeriod.String(), "reason", err.Error())
	case err != nil:
		a.log.Warn(stopped+"; "+meanwhile, "resyncPeriod", a.cfg.ResyncPeriod.String(), "error", err.Error())
	}
}

// mountsChanged makes the next pass of each touched launcher's VMI read
// the mount table again and enqueues it, or every VMI when changes were
// lost.
func (a *Agent) mountsChanged(h *mountHolds, c MountChange, now time.Time) {
	if c.Lost {
		// The passes this brings must not plan from a table read before
		// the changes that were lost.
		a.snaps.lost()
		a.enqueueAll()
		return
	}
	for _, l := range c.Launchers {
		a.snaps.touched(l)
		for _, key := range a.vmiKeysForLauncher(l) {
			a.admitPass(h, key, now)
		}
	}
}

// admitPass enqueues key for an event-driven pass as its bucket allows:
// now, when the next pass is due, or not at all when one is already
// waiting for that.
func (a *Agent) admitPass(h *mountHolds, key string, now time.Time) {
	switch wait, ok := h.admit(key, now); {
	case !ok:
	case wait == 0:
		a.queue.Add(key)
	default:
		a.queue.AddAfter(key, wait)
	}
}

// vmiKeysForLauncher returns the VMI whose launcher l is: from the pod
// cache, or, for a launcher already gone from it, the VMI that remembers
// it (its pass empties the launcher).
func (a *Agent) vmiKeysForLauncher(l types.UID) []string {
	if pod, ok := a.PodByUID(l); ok {
		if keys := a.vmiKeysForPod(pod); len(keys) > 0 {
			return keys
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var keys []string
	for key, s := range a.states {
		if s.launchers[l] {
			keys = append(keys, key)
		}
	}
	return keys
}

// mountHolds holds each VMI key's bucket of event-driven passes.
type mountHolds struct {
	mu   sync.Mutex
	keys map[string]*mountHold
}

// mountHold is one key's bucket: tokens as of at, and when a pass already
// enqueued for later is due.
type mountHold struct {
	tokens float64
	at     time.Time
	due    time.Time
}

// admit says whether an event at now enqueues key, and after how long: at
// once while the bucket has a pass, when the next one is due otherwise,
// and not at all while such a later pass is still waiting.
func (h *mountHolds) admit(key string, now time.Time) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys = map[string]*mountHold{}
	}
	for k, b := range h.keys {
		// A full bucket with nothing due is the same as none.
		if k != key && b.fill(now) >= mountEventBurst && !now.Before(b.due) {
			delete(h.keys, k)
		}
	}
	b := h.keys[key]
	if b == nil {
		b = &mountHold{tokens: mountEventBurst, at: now}
		h.keys[key] = b
	}
	if now.Before(b.due) {
		return 0, false
	}
	b.tokens = b.fill(now) - 1
	b.at = now
	if b.tokens >= 0 {
		return 0, true
	}
	wait := time.Duration(-b.tokens * float64(mountEventRefill))
	b.due = now.Add(wait)
	return wait, true
}

// fill is the bucket's tokens at now.
func (b *mountHold) fill(now time.Time) float64 {
	return min(mountEventBurst, b.tokens+float64(now.Sub(b.at))/float64(mountEventRefill))
}
