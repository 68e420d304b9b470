// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/outcome"
)

// Why growth has a runner of its own.
//
// A growth check can take as long as the filesystem lets it: an online
// resize waits for a frozen filesystem (a Longhorn snapshot freezes it
// while an expansion is due) and the engine gives up on it only after its
// growth deadline, minutes later. Run on a reconcile worker, two such
// checks held both workers, and every attach and detach of the node waited
// for the thaw. So apply never calls Engine.Grow: it hands the check to
// this runner and moves on, and the runner's result comes back through the
// VMI's next reconcile, which reports it as if it had been made in place.
// Checks run one after the other, each on a thread of the engine's own,
// but the runner waits for one at most growthStagger before it starts the
// next, up to growthChecksAtOnce running: one volume whose storage hangs
// holds its own check, not every other volume's growth for --grow-timeout.
// Run side by side from the start, a cold start's hundreds of checks took
// the CPU its verification needed (0.54 s became 0.69 s on the scale
// node). The engine asks a hung volume's storage nothing more until its
// check returns, and the plan sends no check for a volume whose storage
// did not answer its probe, so only volumes that hang at once, each the
// first time, take the slots.
//
// Growth also yields to mounts: a batch of checks waits until the
// reconcile queue is empty, for at most growthYield. At a start every
// mounted filesystem volume gets a check, and made alongside the first
// passes they took a sixth of the agent's CPU while the node's volumes
// were still being verified; a resize found a second later costs nobody
// anything. The bound keeps a storm of changes from holding growth back.
//
// A check that found what the last one reported (nothing grown, the same
// sizes, for the same claim) is news to nobody: it is dropped and the VMI
// is not brought back, or every resync would make two passes of every
// VMI, the second only to report nothing.

// growKey names one volume of one launcher of one VMI key.
type growKey struct {
	vmi      string
	launcher types.UID
	volume   string
}

// growDone is a finished check, kept until the VMI's reconcile reports it.
type growDone struct {
	asked DesiredVolume // the volume as desired when the check was made
	r     applied
}

// growRunner queues growth checks and keeps their results.
type growRunner struct {
	mu     sync.Mutex
	queued map[growKey]DesiredVolume // waiting or running
	order  []growKey                 // waiting, oldest first
	done   growResults
	// reported is the last check of each volume a reconcile took, as far
	// as a repeat of it is told by.
	reported growResults
	wake     chan struct{}
	// slots holds one token per check running; running counts them too,
	// for a caller that waits for them (tests).
	slots   chan struct{}
	running sync.WaitGroup
	// idle is told, without blocking, when a worker leaves the reconcile
	// queue empty.
	idle chan struct{}
}

// growthYield is the longest a batch of growth checks waits for the
// reconcile queue to empty.
const growthYield = time.Second

// growthChecksAtOnce is how many growth checks run at once, at most: as
// many as the reconcile workers. growthStagger is how long the runner
// waits for a check before it starts the next beside it.
const (
	growthChecksAtOnce = 4
	growthStagger      = time.Second
)

func newGrowRunner() *growRunner {
	return &growRunner{queued: map[growKey]DesiredVolume{}, done: growResults{}, reported: growResults{},
		wake: make(chan struct{}, 1), idle: make(chan struct{}, 1), slots: make(chan struct{}, growthChecksAtOnce)}
}

// growResults holds checks by VMI key, so that every pass's prune reads
// its own VMI's: scanning the node's were a node's results times its
// passes, every resync.
type growResults map[string]map[growKey]growDone

func (m growResults) get(k growKey) (growDone, bool) {
	d, ok := m[k.vmi][k]
	return d, ok
}

func (m growResults) put(k growKey, d growDone) {
	if m[k.vmi] == nil {
		m[k.vmi] = map[growKey]growDone{}
	}
	m[k.vmi][k] = d
}

func (m growResults) drop(k growKey) {
	delete(m[k.vmi], k)
	if len(m[k.vmi]) == 0 {
		delete(m, k.vmi)
	}
}

// queueIdle tells a waiting batch that the reconcile queue is empty.
func (g *growRunner) queueIdle() {
	select {
	case g.idle <- struct{}{}:
	default:
	}
}

// take returns the finished check of k when it was made for the volume as
// v desires it now; a result for another capacity or source is dropped.
func (g *growRunner) take(k growKey, v DesiredVolume) (applied, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.done.get(k)
	if !ok {
		return applied{}, false
	}
	g.done.drop(k)
	g.reported.put(k, growDone{asked: d.asked, r: applied{Result: d.r.Result, Err: d.r.Err, Grow: d.r.Grow}})
	return d.r, sameGrowth(d.asked, v)
}

// sameGrowth reports whether a check made for a answers one for b.
func sameGrowth(a, b DesiredVolume) bool {
	return a.Mode == b.Mode && a.CapacityBytes == b.CapacityBytes && a.FilesystemOverhead == b.FilesystemOverhead &&
		a.Source == b.Source && a.LauncherUID == b.LauncherUID
}

// submit queues a check of k unless one is waiting or running.
func (g *growRunner) submit(k growKey, v DesiredVolume) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.queued[k]; ok {
		return
	}
	g.queued[k] = v
	g.order = append(g.order, k)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// ready reports whether a finished check of the volume waits to be
// reported, for the plan.
func (g *growRunner) ready(vmi string, launcher types.UID) func(string) bool {
	return func(volume string) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, ok := g.done.get(growKey{vmi, launcher, volume})
		return ok
	}
}

// next pops the oldest waiting check that is still wanted.
func (g *growRunner) next() (growKey, DesiredVolume, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.order) > 0 {
		k := g.order[0]
		g.order = g.order[1:]
		if v, ok := g.queued[k]; ok {
			return k, v, true
		}
	}
	return growKey{}, DesiredVolume{}, false
}

// finish records a check's result and says whether it is news: anything
// but a repeat of the last result reported for the same claim. The
// result of a check pruned while it ran (its VMI forgotten, its volume
// gone) is dropped: no pass of that VMI would take it.
func (g *growRunner) finish(k growKey, v DesiredVolume, r applied) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, wanted := g.queued[k]
	delete(g.queued, k)
	if !wanted {
		return false
	}
	if last, ok := g.reported.get(k); ok && sameGrowth(last.asked, v) && repeats(r, last.r) {
		return false
	}
	g.done.put(k, growDone{asked: v, r: r})
	return true
}

// repeats reports whether r found nothing to do and what last found.
func repeats(r, last applied) bool {
	return r.Result == outcome.Unchanged && r.Err == nil && !r.Canceled &&
		last.Result == r.Result && last.Err == nil && last.Grow == r.Grow
}

// prune drops the checks of vmi that keep does not want reported any
// more (a launcher left, a volume was removed, the VMI was forgotten):
// finished, waiting, or running, whose result finish then drops.
func (g *growRunner) prune(vmi string, keep func(growKey) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range []growResults{g.done, g.reported} {
		for k := range m[vmi] {
			if keep == nil || !keep(k) {
				m.drop(k)
			}
		}
	}
	for k := range g.queued {
		if k.vmi == vmi && (keep == nil || !keep(k)) {
			delete(g.queued, k)
		}
	}
}

// growthLoop runs queued growth checks until ctx ends.
func (a *Agent) growthLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.growth.wake:
		}
		a.yieldToMounts(ctx)
		a.runGrowth(ctx)
	}
}

// yieldToMounts waits until the reconcile queue is empty, for at most
// growthYield.
func (a *Agent) yieldToMounts(ctx context.Context) {
	select {
	case <-a.growth.idle: // an old word: the queue may have filled since
	default:
	}
	if a.queue.Len() == 0 {
		return
	}
	t := time.NewTimer(growthYield)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-a.growth.idle:
	case <-t.C:
	}
}

// runGrowth starts every waiting check in order, each once a slot is free
// and the one before it finished or ran growthStagger, and brings each VMI
// back to the queue to report a result that is news. It returns once none
// waits, while checks may still run.
func (a *Agent) runGrowth(ctx context.Context) {
	for ctx.Err() == nil {
		k, v, ok := a.growth.next()
		if !ok {
			return
		}
		select {
		case a.growth.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		a.growth.running.Add(1)
		done := make(chan struct{})
		go func() {
			defer a.growth.running.Done()
			defer func() { <-a.growth.slots }()
			defer close(done)
			if a.growth.finish(k, v, a.growOnce(ctx, k, v)) {
				a.queue.Add(k.vmi)
			}
		}()
		a.growth.stagger(ctx, done)
	}
}

// stagger waits until done is closed, for at most growthStagger.
func (g *growRunner) stagger(ctx context.Context, done <-chan struct{}) {
	t := time.NewTimer(growthStagger)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// growOnce makes one check on a mount-table snapshot current for its
// launcher.
func (a *Agent) growOnce(ctx context.Context, k growKey, v DesiredVolume) applied {
	o := op{Kind: outcome.Grow, Name: k.volume, Intent: &volumeIntent{Desired: v}}
	start := time.Now()
	snap, read, err := a.snapshotFor(ctx, k.launcher)
	a.reportSnapshot(read)
	if err != nil {
		return applied{Op: o, Took: time.Since(start), Result: outcome.Error,
			Err: fmt.Errorf("grow volume %q: %w", k.volume, err), Canceled: ctx.Err() != nil}
	}
	return a.call(ctx, snap, k.launcher, o)
}
