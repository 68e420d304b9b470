// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// TestGrowthNeverHoldsAWorker: a growth check that does not return (a
// filesystem frozen under an online resize) holds neither the reconcile
// that planned it nor any other: the VMI's other work goes on, the check
// runs once on the growth runner, and its result is reported by the pass
// after it returned.
func TestGrowthNeverHoldsAWorker(t *testing.T) {
	ta := standardAgent(t, nil)
	ta.engine.growing, ta.engine.released = make(chan string), make(chan struct{})
	ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem))
	ta.engine.grow["hp"] = GrowResult{DeviceBytes: 10 << 30, FilesystemBefore: 5 << 30, FilesystemAfter: 10 << 30, FilesystemType: "xfs", Grown: true}
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "new", Claim: "c2", AttachUID: attachUID}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	reconciled := func(what string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- ta.reconcile(ctx, testKey) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute): // a hang detector, not a budget
			t.Fatalf("%s: the reconcile waited for a growth check that does not return", what)
		}
	}
	reconciled("first pass")
	if got := ta.engine.changing(); !slices.Equal(got, []string{"attach new Filesystem attach-uid/pv-2"}) {
		t.Fatalf("first pass calls = %v", got)
	}
	go ta.growthLoop(ctx)
	if name := <-ta.engine.growing; name != "hp" {
		t.Fatalf("growth of %q, want hp", name)
	}
	// The growth check hangs; the VMI is reconciled again meanwhile.
	ta.engine.reset()
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID, Capacity: "20Gi"}, vol{Name: "new", Claim: "c2", AttachUID: attachUID}))
	reconciled("pass during the hung growth")
	// The volume attached in the first pass gets its first check beside
	// the hung one (growthChecksAtOnce); hp gets none while its own hangs.
	if name := <-ta.engine.growing; name != "new" {
		t.Fatalf("growth of %q during the hung growth, want new", name)
	}
	for _, c := range ta.engine.changing() {
		if strings.HasPrefix(c, "grow hp") || !strings.HasPrefix(c, "grow") {
			t.Fatalf("calls during the hung growth = %v, want only new's check (one check at a time per volume)", ta.engine.changing())
		}
	}
	ta.events()
	ta.engine.mu.Lock()
	ta.engine.growing = nil // the filesystem thaws: later checks return at once
	ta.engine.mu.Unlock()
	close(ta.engine.released)
	// The runner brings the VMI back after each check; the check made for
	// 10Gi is not the answer for the 20Gi claim, so a new one is queued and
	// only its result is reported.
	var events []string
	for pass := 0; pass < 5 && !hasEvent(events, "Normal FilesystemExpanded"); pass++ {
		key, _ := ta.queue.Get()
		ta.queue.Done(key)
		if key != testKey {
			t.Fatalf("queued %q, want %q", key, testKey)
		}
		reconciled("pass after a growth check returned")
		events = append(events, ta.events()...)
	}
	if !hasEvent(events, "Normal FilesystemExpanded Volume hp: filesystem xfs grew from 5Gi to 10Gi") {
		t.Fatalf("events = %v", events)
	}
	var grows []string
	for _, c := range ta.engine.changing() {
		if c == "grow hp 10737418240" || c == "grow hp 21474836480" {
			grows = append(grows, c)
		}
	}
	if !slices.Equal(grows, []string{"grow hp 21474836480"}) {
		t.Fatalf("growth checks of hp after the thaw = %v, want one for 20Gi", grows)
	}
}

// TestGrowthHungCheckHoldsNoOther (#37, defect 3): a growth check that
// hangs on its volume's storage holds its own slot only: the check of
// another volume queued after it runs and is reported meanwhile.
func TestGrowthHungCheckHoldsNoOther(t *testing.T) {
	ta := standardAgent(t, nil)
	hang := make(chan struct{})
	defer close(hang)
	ta.engine.mu.Lock()
	ta.engine.growHang = map[string]chan struct{}{"hung": hang}
	ta.engine.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range []string{"hung", "healthy"} {
		ta.growth.submit(growKey{vmi: testKey, launcher: launcherUID, volume: name},
			DesiredVolume{Name: name, Mode: kubevirt.Filesystem, LauncherUID: launcherUID, CapacityBytes: 1 << 30})
	}
	go ta.growthLoop(ctx)
	got := make(chan string, 1)
	go func() {
		key, _ := ta.queue.Get()
		ta.queue.Done(key)
		got <- key
	}()
	select {
	case key := <-got:
		if key != testKey {
			t.Fatalf("queued %q, want %q", key, testKey)
		}
	case <-time.After(time.Minute): // a hang detector, not a budget
		t.Fatal("the healthy volume's growth check waited behind the hung one")
	}
	if !ta.growth.ready(testKey, launcherUID)("healthy") || ta.growth.ready(testKey, launcherUID)("hung") {
		t.Fatal("want the healthy volume's check finished and the hung one's not")
	}
}

// TestGrowthRepeatBringsNoPass: a growth check that finds what the last
// reported check found, for the same claim, brings its VMI back to no
// second pass (every resync made two passes of every VMI, the second only
// to report nothing). Any difference is news: another size, a growth, an
// error, another capacity, or a volume whose reports were pruned.
func TestGrowthRepeatBringsNoPass(t *testing.T) {
	k := growKey{vmi: testKey, launcher: launcherUID, volume: "hp"}
	v := DesiredVolume{Name: "hp", Mode: kubevirt.Filesystem, CapacityBytes: 10 << 30}
	sized := GrowResult{DeviceBytes: 10 << 30, FilesystemBefore: 9 << 30, FilesystemAfter: 9 << 30, FilesystemType: "xfs"}
	same := applied{Result: outcome.Unchanged, Grow: sized}
	bigger := v
	bigger.CapacityBytes = 20 << 30
	for _, tc := range []struct {
		name  string
		prune bool
		asked DesiredVolume
		r     applied
		news  bool
	}{
		{name: "a repeat", asked: v, r: same},
		{name: "another size", asked: v, r: applied{Result: outcome.Unchanged, Grow: GrowResult{DeviceBytes: 11 << 30}}, news: true},
		{name: "a growth", asked: v, r: applied{Result: outcome.Grown, Grow: sized}, news: true},
		{name: "an error", asked: v, r: applied{Result: outcome.Error, Err: errors.New("eio"), Grow: sized}, news: true},
		{name: "another capacity", asked: bigger, r: same, news: true},
		{name: "after a prune", prune: true, asked: v, r: same, news: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGrowRunner()
			// A check runs as the growth loop runs it: submitted,
			// taken off the queue, finished.
			check := func(asked DesiredVolume, r applied) bool {
				g.submit(k, asked)
				g.next()
				return g.finish(k, asked, r)
			}
			if !check(v, same) {
				t.Fatal("the first check is not news")
			}
			if _, ok := g.take(k, v); !ok {
				t.Fatal("the first check was not taken")
			}
			if tc.prune {
				g.prune(testKey, nil)
			}
			if news := check(tc.asked, tc.r); news != tc.news {
				t.Fatalf("finish = %v, want %v", news, tc.news)
			}
			if ok := g.ready(testKey, launcherUID)("hp"); ok != tc.news {
				t.Fatalf("ready = %v, want %v", ok, tc.news)
			}
		})
	}
}

// TestGrowthYieldsToMounts: a batch of growth checks waits while passes
// are queued, goes on as soon as a pass leaves the queue empty, and waits
// no longer than growthYield when it never empties (a storm). The bubble's
// clock makes the bound exact and the waits durable.
func TestGrowthYieldsToMounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued bool
		drain  bool
		want   time.Duration
	}{
		{"queue empty", false, false, 0},
		{"a pass empties the queue", true, true, 0},
		{"the queue never empties", true, false, growthYield},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &Agent{growth: newGrowRunner(), queue: workqueue.NewTypedRateLimitingQueue(
					workqueue.DefaultTypedControllerRateLimiter[string]())}
				defer a.queue.ShutDown()
				a.growth.queueIdle() // an old word, from before the queue filled
				if tc.queued {
					a.queue.Add(testKey)
				}
				start := time.Now()
				done := make(chan struct{})
				go func() {
					a.yieldToMounts(context.Background())
					close(done)
				}()
				synctest.Wait()
				if tc.drain {
					select {
					case <-done:
						t.Fatal("growth went on while a pass was queued")
					default:
					}
					key, _ := a.queue.Get()
					a.queue.Done(key)
					a.noteQueueIdle()
				}
				<-done
				if waited := time.Since(start); waited != tc.want {
					t.Errorf("growth waited %s, want %s", waited, tc.want)
				}
			})
		})
	}
}

// TestGrowthPruneKeepsOtherVMIs: a pass prunes its own VMI's results
// alone, and only those keep does not want.
func TestGrowthPruneKeepsOtherVMIs(t *testing.T) {
	g := newGrowRunner()
	a1, a2, b1 := growKey{"ns/a", launcherUID, "v1"}, growKey{"ns/a", launcherUID, "v2"}, growKey{"ns/b", launcherUID, "v1"}
	for _, k := range []growKey{a1, a2, b1} {
		g.done.put(k, growDone{})
		g.reported.put(k, growDone{})
	}
	g.prune("ns/a", func(k growKey) bool { return k == a2 })
	for _, tc := range []struct {
		k    growKey
		want bool
	}{{a1, false}, {a2, true}, {b1, true}} {
		_, done := g.done.get(tc.k)
		_, reported := g.reported.get(tc.k)
		if done != tc.want || reported != tc.want {
			t.Errorf("%+v after the prune: done %v, reported %v; want %v", tc.k, done, reported, tc.want)
		}
	}
	g.prune("ns/a", nil)
	if _, ok := g.done["ns/a"]; ok {
		t.Errorf("a VMI whose results are all pruned keeps an empty map")
	}
}

// TestGrowthPruneDropsChecksInFlight: a check of a VMI forgotten while it
// waited is never run, and the result of one forgotten while it ran is
// dropped: nothing of the VMI stays in the runner for the life of the
// agent. A check of another VMI runs and is kept.
func TestGrowthPruneDropsChecksInFlight(t *testing.T) {
	g := newGrowRunner()
	waiting, running, other := growKey{"ns/a", launcherUID, "v1"}, growKey{"ns/a", launcherUID, "v2"}, growKey{"ns/b", launcherUID, "v1"}
	v := DesiredVolume{Name: "v", Mode: kubevirt.Filesystem}
	g.submit(running, v)
	g.submit(waiting, v)
	g.submit(other, v)
	k, _, ok := g.next()
	if !ok || k != running {
		t.Fatalf("next = %+v, %v; want %+v", k, ok, running)
	}
	g.prune("ns/a", nil) // forgotten: one check running, one waiting
	if news := g.finish(running, v, applied{Result: outcome.Grown}); news {
		t.Errorf("the result of a check pruned while it ran is news")
	}
	if k, _, ok := g.next(); !ok || k != other {
		t.Fatalf("next after the prune = %+v, %v; want %+v alone", k, ok, other)
	}
	g.finish(other, v, applied{Result: outcome.Grown})
	if _, _, ok := g.next(); ok {
		t.Fatal("a pruned check is still waiting")
	}
	if _, ok := g.done["ns/a"]; ok || len(g.queued) != 0 {
		t.Errorf("the forgotten VMI keeps results %v, queued %v", g.done["ns/a"], g.queued)
	}
	if _, ok := g.done.get(other); !ok {
		t.Error("another VMI's result was dropped")
	}
}
