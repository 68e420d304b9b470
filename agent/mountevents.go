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

// MountChange is one batch of mount changes the node reported.
type MountChange struct {
	// Launchers are the launcher pods whose hotplug-disks a mount was
	// attached to or detached from.
	Launchers []types.UID
	// Lost: the node dropped changes, so any launcher may have changed.
	Lost bool
}

// MountWatcher is an Engine that reports mount changes in launchers'
// hotplug-disks as they happen (node.Engine, through package mountwatch,
// on Linux ≥ 6.15). A foreign unmount of a target, or a mount stacked on
// one, is then repaired at once; without it, at the next resync.
type MountWatcher interface {
	// WatchMounts calls changed with every batch until ctx ends, from one
	// goroutine. It returns an error wrapping errors.ErrUnsupported at once
	// when the node reports no mount changes.
	WatchMounts(ctx context.Context, changed func(MountChange)) error
}

// mountEventHold is how soon a launcher's mount events enqueue its VMI
// again after they last did. The agent's own attaches and detaches are
// reported too, so each of its changing passes is followed by one pass
// that finds nothing to do and changes nothing; the hold bounds a fight
// with another mounter (one that stacks again what the agent peeled) to
// a pass at the first event and one at the end of the hold, per VMI and
// hold, never a loop at the speed of events.
const mountEventHold = time.Second

// watchMounts runs the engine's mount watcher, if it has one, until ctx
// ends. The resync stays the safety net: a watcher that is unsupported or
// stops costs only the speed of repairs.
func (a *Agent) watchMounts(ctx context.Context) {
	w, ok := a.engine.(MountWatcher)
	if !ok {
		return
	}
	h := &mountHolds{last: map[string]time.Time{}}
	err := w.WatchMounts(ctx, func(c MountChange) { a.mountsChanged(h, c, time.Now()) })
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, errors.ErrUnsupported):
		a.log.Info("the node reports no mount changes; foreign changes to targets are repaired at the next resync",
			"resyncPeriod", a.cfg.ResyncPeriod.String(), "reason", err.Error())
	case err != nil:
		a.log.Warn("mount change reports stopped; foreign changes to targets are repaired at the next resync",
			"resyncPeriod", a.cfg.ResyncPeriod.String(), "error", err.Error())
	}
}

// mountsChanged makes the next pass of each touched launcher's VMI read
// the mount table again and enqueues it, or every VMI when changes were
// lost.
func (a *Agent) mountsChanged(h *mountHolds, c MountChange, now time.Time) {
	if c.Lost {
		for _, l := range c.Launchers {
			a.snaps.touched(l)
		}
		a.enqueueAll()
		return
	}
	for _, l := range c.Launchers {
		a.snaps.touched(l)
		for _, key := range a.vmiKeysForLauncher(l) {
			if wait := h.admit(key, now); wait == 0 {
				a.queue.Add(key)
			} else if wait > 0 {
				a.queue.AddAfter(key, wait)
			}
		}
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

// mountHolds remembers when mount events last enqueued each VMI key.
type mountHolds struct {
	mu      sync.Mutex
	last    map[string]time.Time
	pending map[string]bool
}

// admit says when an event at now may enqueue key: 0 for now, the rest
// of the hold if key was enqueued less than a hold ago (once: a key
// already due at the end of its hold returns -1, nothing more to add).
func (h *mountHolds) admit(key string, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, t := range h.last {
		if now.Sub(t) >= mountEventHold {
			delete(h.last, k)
			delete(h.pending, k)
		}
	}
	t, held := h.last[key]
	switch {
	case !held:
		h.last[key] = now
		return 0
	case h.pending[key]:
		return -1
	}
	if h.pending == nil {
		h.pending = map[string]bool{}
	}
	h.pending[key] = true
	return mountEventHold - now.Sub(t)
}
