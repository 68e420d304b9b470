// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/mount"
)

// The launcher check and QEMU's check are remembered once they pass
// (sight.go, held.go), and Observe's own look takes the attributes the
// kernel cached, so none of them reaches a volume's storage again while
// the bind stays. Storage that stops answering after a volume's first
// passes (an NFS server gone, a FUSE daemon hung) would never be told.
// Each pass therefore asks the filesystem under every healthy bind to
// answer (mount.Answers), on a goroutine of its own: not on the
// namespace's thread, where a hung request would hold every other call of
// the node until its deadline.

// A pass waits for its probes only briefly (answerWait): waited for up to
// the call deadline on a reconcile worker, N affected VMIs of a storage
// outage held every other hotplug of the node for N/4 deadlines (#37).
// A probe still out after that is remembered; its volume is reported as
// its remembered checks say, and the VMI is asked to come back when the
// deadline has passed, which then finds the probe answered or reports the
// volume stuck. Only a bind whose checks are not remembered (new, or
// changed) waits for the full deadline: its checks reach the storage
// too, and they are made once per bind, not once per pass.
//
// Storage that answers, but later than the deadline, would flap between
// checked and stuck: stuck while the probe is out past its deadline, and
// checked in the pass after it came back, until the next probe is out as
// long. A probe that answered late marks its volume, and a marked
// volume's next probe that is still out after answerWait is stuck at
// once; an answer in time clears the mark.

// answerWait is how long a pass waits for the probes it started before it
// leaves them out.
const answerWait = 200 * time.Millisecond

// answerMemo remembers, per target, a probe still out: until it returns,
// the volume is not asked again, so a hung server holds one thread per
// volume, not one per pass; and the volumes whose last probe answered
// after its deadline.
type answerMemo struct {
	mu      sync.Mutex
	pending map[growKey]*probe
	late    map[growKey]bool
}

// probe is one mount.Answers call; done is closed when it returns, after
// end is set.
type probe struct {
	target string
	since  time.Time
	end    time.Time
	done   chan struct{}
}

// out reports whether p has not returned.
func (p *probe) out() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// settle returns k's probe still out, or nil: a probe that returned is
// dropped, and marks k late when it took longer than deadline.
func (m *answerMemo) settle(k growKey, deadline time.Duration) *probe {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pending[k]
	if p == nil || p.out() {
		return p
	}
	delete(m.pending, k)
	m.markLocked(k, deadline > 0 && p.end.Sub(p.since) > deadline)
	return nil
}

func (m *answerMemo) markLocked(k growKey, late bool) {
	if !late {
		delete(m.late, k)
		return
	}
	if m.late == nil {
		m.late = map[growKey]bool{}
	}
	m.late[k] = true
}

func (m *answerMemo) isLate(k growKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.late[k]
}

// answeredInTime clears k's late mark.
func (m *answerMemo) answeredInTime(k growKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.markLocked(k, false)
}

// waiting is the volumes of launcher whose probe has not returned.
func (m *answerMemo) waiting(launcher types.UID) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for k, p := range m.pending {
		if k.launcher == launcher && p.out() {
			out[k.name] = true
		}
	}
	return out
}

// pendingCount is how many probes have not returned: each holds a thread.
func (m *answerMemo) pendingCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, p := range m.pending {
		if p.out() {
			n++
		}
	}
	return n
}

func (m *answerMemo) put(k growKey, p *probe) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		m.pending = map[growKey]*probe{}
	}
	m.pending[k] = p
}

// answers is what a pass learnt of its launcher's storage: the volumes
// whose filesystem did not answer by its deadline (errors wrapping
// hotplug.ErrStuck), and those whose probe is still out within it, with the
// time left.
type answers struct {
	stuck     map[string]error
	answering map[string]time.Duration
}

// answered asks the filesystems under the launcher's healthy binds to
// answer, all at once (the listing opened each bind whose storage has no
// probe out), and waits for them as the comment at the top says. A
// filesystem that answered with an error is not its concern: Observe's
// look reports a dead source.
func (e *Engine) answered(ctx context.Context, launcher types.UID, ls listing) answers {
	a := answers{stuck: map[string]error{}, answering: map[string]time.Duration{}}
	probes := map[string]*probe{}
	long := map[string]bool{}
	for _, b := range ls.binds {
		if !b.o.Healthy(b.o.Mode) {
			continue
		}
		k := growKey{launcher, b.o.Name}
		if f := ls.bound[b.o.Name]; f != nil {
			probes[b.o.Name] = startProbe(b.target, f)
			askSight, askHeld := e.needsChecks(k, b)
			long[b.o.Name] = askSight || askHeld
		} else if p := e.answers.settle(k, e.callTimeout); p != nil {
			if askSight, askHeld := e.needsChecks(k, b); askSight || askHeld {
				// Checks to make on storage that has not answered an
				// earlier probe: they would only wait on it.
				a.stuck[b.o.Name] = notAnswered(b.target, p.since)
				continue
			}
			e.judgeOut(k, b.o.Name, p, a)
		}
	}
	if !e.awaitProbes(ctx, probes, long) {
		return a // the agent stops: nothing was told
	}
	for volume, p := range probes {
		k := growKey{launcher, volume}
		if !p.out() {
			e.answers.answeredInTime(k)
			continue
		}
		e.answers.put(k, p)
		e.judgeOut(k, volume, p, a)
	}
	return a
}

// judgeOut reports k's probe p, still out: stuck past the deadline, or at
// once when k's last probe answered late; else answering.
func (e *Engine) judgeOut(k growKey, volume string, p *probe, a answers) {
	age := time.Since(p.since)
	if e.callTimeout <= 0 || age < e.callTimeout && !e.answers.isLate(k) {
		a.answering[volume] = max(e.callTimeout-age, answerWait)
		return
	}
	a.stuck[volume] = notAnswered(p.target, p.since)
}

// startProbe runs mount.Answers of f, the bind on target, on a goroutine
// of its own, which closes f when the filesystem answers.
func startProbe(target string, f *os.File) *probe {
	p := &probe{target: target, since: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer f.Close()
		_ = mount.Answers(f)
		p.end = time.Now()
	}()
	return p
}

// awaitProbes waits for probes for answerWait, and for those of long until
// the call deadline. It reports false when ctx ended first (the agent
// stops).
func (e *Engine) awaitProbes(ctx context.Context, probes map[string]*probe, long map[string]bool) bool {
	short := answerWait
	if e.callTimeout > 0 {
		short = min(short, e.callTimeout)
	}
	for _, phase := range []struct {
		wait  time.Duration
		which func(string) bool
	}{{short, func(string) bool { return true }}, {e.callTimeout - short, func(v string) bool { return long[v] }}} {
		if phase.wait <= 0 && e.callTimeout > 0 {
			continue
		}
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if e.callTimeout > 0 {
			wctx, cancel = context.WithTimeout(ctx, phase.wait)
		}
		for volume, p := range probes {
			if phase.which(volume) && !p.returned(wctx) && ctx.Err() != nil {
				cancel()
				return false
			}
		}
		cancel()
	}
	return true
}

// returned waits for p until ctx is done and says whether p returned; a
// probe that returned is never taken for one that did not, even when both
// are ready at once.
func (p *probe) returned(ctx context.Context) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	select {
	case <-p.done:
		return true
	case <-ctx.Done():
		return false
	}
}

func notAnswered(target string, since time.Time) error {
	return fmt.Errorf("%w: the filesystem under %q has not answered since %s", hotplug.ErrStuck,
		target, since.UTC().Format(time.RFC3339))
}
