// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package node

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
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

// answerMemo remembers, per target, a probe given up at its deadline that
// has not returned: until it does, the volume is reported stuck without
// asking again, so a hung server holds one thread per volume, not one per
// pass.
type answerMemo struct {
	mu      sync.Mutex
	pending map[growKey]*probe
}

// probe is one mount.Answers call; done is closed when it returns.
type probe struct {
	target string
	since  time.Time
	done   chan struct{}
}

// hung is the pending probe of k that has not returned, or nil.
func (m *answerMemo) hung(k growKey) *probe {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pending[k]
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		delete(m.pending, k)
		return nil
	default:
		return p
	}
}

// waiting is the volumes of launcher whose probe has not returned.
func (m *answerMemo) waiting(launcher types.UID) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for k, p := range m.pending {
		select {
		case <-p.done:
		default:
			if k.launcher == launcher {
				out[k.name] = true
			}
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
		select {
		case <-p.done:
		default:
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

// answered asks the filesystems under the launcher's healthy binds to
// answer, all at once, and waits for them until the call deadline: the
// listing opened each bind whose storage has no probe pending. It returns,
// for each volume whose filesystem did not answer in time (now or at an
// earlier pass), an error wrapping agent.ErrStuck. A filesystem that
// answered with an error is not its concern: Observe's look reports a dead
// source.
func (e *Engine) answered(ctx context.Context, launcher types.UID, ls listing) map[string]error {
	out := map[string]error{}
	probes := map[string]*probe{}
	for _, b := range ls.binds {
		if !b.o.Healthy(b.o.Mode) {
			continue
		}
		if f := ls.bound[b.o.Name]; f != nil {
			probes[b.o.Name] = startProbe(b.target, f)
		} else if p := e.answers.hung(growKey{launcher, b.o.Name}); p != nil {
			out[b.o.Name] = notAnswered(b.target, p.since)
		}
	}
	e.awaitProbes(ctx, launcher, probes, out)
	return out
}

// startProbe runs mount.Answers of f, the bind on target, on a goroutine
// of its own, which closes f when the filesystem answers.
func startProbe(target string, f *os.File) *probe {
	p := &probe{target: target, since: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer f.Close()
		_ = mount.Answers(f)
	}()
	return p
}

// awaitProbes waits for probes until the call deadline and records in out
// and in the memo each one that has not returned by then.
func (e *Engine) awaitProbes(ctx context.Context, launcher types.UID, probes map[string]*probe, out map[string]error) {
	if e.callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.callTimeout)
		defer cancel()
	}
	for volume, p := range probes {
		if p.returned(ctx) {
			continue
		}
		if ctx.Err() != context.DeadlineExceeded {
			return // the agent stops: nothing was told
		}
		e.answers.put(growKey{launcher, volume}, p)
		out[volume] = notAnswered(p.target, p.since)
	}
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
	return fmt.Errorf("%w: the filesystem under %q has not answered since %s", agent.ErrStuck,
		target, since.UTC().Format(time.RFC3339))
}
