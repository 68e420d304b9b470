// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// watchingEngine is the fake engine with mount changes fed by the test.
type watchingEngine struct {
	*fakeEngine
	changes chan MountChange
	err     error // returned at once instead of watching
}

var _ MountWatcher = (*watchingEngine)(nil)

func (w *watchingEngine) WatchMounts(ctx context.Context, changed func(MountChange)) error {
	if w.err != nil {
		return w.err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c := <-w.changes:
			changed(c)
		}
	}
}

// TestForeignUnmountRepairedByEvent: with a resync far away, a target the
// engine no longer observes (someone unmounted it) is attached again
// after the engine reports a change of its launcher, and the pass after
// it reads the mount table again instead of sharing the read that still
// had the mount.
func TestForeignUnmountRepairedByEvent(t *testing.T) {
	obs := newKickObserver()
	ta := standardAgent(t, func(c *Config) { c.ResyncPeriod = time.Hour; c.Observer = obs })
	w := &watchingEngine{fakeEngine: ta.engine, changes: make(chan MountChange)}
	ta.Agent.engine = w
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	if err := ta.reconcile(t.Context(), testKey); err != nil {
		t.Fatal(err)
	}
	ta.engine.reset()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go ta.worker(ctx)
	go ta.watchMounts(ctx)
	t.Cleanup(ta.queue.ShutDown)
	ta.engine.setObserved(launcherUID) // the foreign unmount
	w.changes <- MountChange{Launchers: []types.UID{launcherUID}}
	obs.waitUntil(t, time.Minute, "re-attach", func() bool { return ta.engine.count("attach hp") == 1 })
	ta.engine.mu.Lock()
	calls := slices.Clone(ta.engine.calls)
	ta.engine.mu.Unlock()
	if !slices.Contains(calls, "snapshot") {
		t.Errorf("the repairing pass shared an old read of the mount table: %v", calls)
	}
}

// TestMountChangesEnqueue: a launcher's change enqueues its VMI, found
// through the pod cache or, once the pod is gone, through what the agent
// remembers; a launcher of no VMI enqueues nothing; a loss enqueues
// every VMI for a resync pass.
func TestMountChangesEnqueue(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.ResyncPeriod = time.Hour })
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	h := &mountHolds{}
	now := time.Now()
	take := func() []string {
		var keys []string
		for ta.queue.Len() > 0 {
			k, _ := ta.queue.Get()
			ta.queue.Done(k)
			keys = append(keys, k)
		}
		return keys
	}
	ta.mountsChanged(h, MountChange{Launchers: []types.UID{"no-such-pod"}}, now)
	if got := take(); len(got) != 0 {
		t.Errorf("a launcher of no VMI enqueued %v", got)
	}
	ta.mountsChanged(h, MountChange{Launchers: []types.UID{launcherUID}}, now)
	if got := take(); !slices.Equal(got, []string{testKey}) {
		t.Errorf("launcher change enqueued %v, want %s", got, testKey)
	}
	if err := ta.podInformer.GetIndexer().Delete(launcherPod()); err != nil {
		t.Fatal(err)
	}
	ta.stateFor(testKey, "vmi-uid").launchers = map[types.UID]bool{launcherUID: true}
	h = &mountHolds{}
	ta.mountsChanged(h, MountChange{Launchers: []types.UID{launcherUID}}, now)
	if got := take(); !slices.Equal(got, []string{testKey}) {
		t.Errorf("a gone launcher's change enqueued %v, want %s from the remembered state", got, testKey)
	}
	ta.mountsChanged(h, MountChange{Lost: true}, now)
	if got := take(); !slices.Contains(got, testKey) || !ta.resync[testKey] {
		t.Errorf("lost changes enqueued %v (resync %t), want a resync pass of %s", got, ta.resync[testKey], testKey)
	}
}

// TestMountHoldsBoundAFight: events for one VMI enqueue it at once while
// its bucket lasts, then once for when the next pass is due however many
// arrive meanwhile; another VMI is not held back, and a pause refills.
func TestMountHoldsBoundAFight(t *testing.T) {
	h := &mountHolds{}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := range mountEventBurst {
		if wait, ok := h.admit("a", t0); !ok || wait != 0 {
			t.Fatalf("event %d of a burst: %s, %t; want at once", i, wait, ok)
		}
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		key    string
		at     time.Duration
		wait   time.Duration
		queued bool
	}{
		{"a", 0, mountEventRefill, true},
		{"a", 100 * ms, 0, false}, // already due later
		{"b", 100 * ms, 0, true},
		{"a", 250 * ms, mountEventRefill, true}, // the pass due took the refill
		{"a", 500*ms + mountEventRefill*mountEventBurst, 0, true},
	} {
		wait, ok := h.admit(tc.key, at(tc.at))
		if wait != tc.wait || ok != tc.queued {
			t.Errorf("%s at %s: %s, %t; want %s, %t", tc.key, tc.at, wait, ok, tc.wait, tc.queued)
		}
	}
}

// TestUnsupportedMountChangesLoggedOnce: an engine that cannot report
// mount changes costs one log line, and the agent goes on.
func TestUnsupportedMountChangesLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	ta := standardAgent(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ta.Agent.engine = &watchingEngine{fakeEngine: ta.engine, err: fmt.Errorf("fanotify_init: %w", errors.ErrUnsupported)}
	ta.watchMounts(t.Context())
	if n := strings.Count(logs.String(), "no mount changes"); n != 1 {
		t.Errorf("logged %d times:\n%s", n, logs.String())
	}
}
