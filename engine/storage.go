// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/grow"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
)

// Why a volume's storage calls have threads of their own.
//
// An attach opens the published volume and its disk.img and chowns it; a
// detach unmounts a bind of it; a growth writes to it and resizes it.
// Each can wait as long as the volume's storage does: a FUSE server that
// stopped answering, an NFS server gone, an xfs frozen for a snapshot.
// On one thread serving the node, one such call held every other VMI's
// attach and detach until its deadline, and every retry of the hung volume
// held them again and wrote off one more thread (#37: a healthy block
// hotplug took 26.6 s instead of 0.6 s beside a frozen xfs).
//
// So each such call runs on a host-namespace runner of its own, taken from
// a small idle pool, and nothing else waits for it. A call given up at its
// deadline keeps its thread, and its volume is not asked again while that
// thread is held: the next attempt fails at once with hotplug.ErrStuck, so a
// hung volume holds one thread, not one per pass. And however many volumes
// hang, no more than heldLimit threads are ever held at once: past it,
// every storage call fails at once until one comes back.
//
// Two calls on one target can now run at once (an orphan sweep and a
// reconcile, say); the mount package judges the target on every call as
// it does beside virt-handler, which changes the same targets from another
// process, so no lock is needed for correctness.

// idleRunners is how many runners wait for the next call: one per
// reconcile worker, so a busy node starts no thread per call.
const idleRunners = 4

// heldLimit bounds the threads that calls given up on hold at once, per
// kind of call (attach and detach, growth).
const heldLimit = 64

// storageCalls runs calls that can wait on a volume's storage.
type storageCalls struct {
	nsPath  string
	timeout time.Duration
	// limit is heldLimit; tests lower it.
	limit int

	mu   sync.Mutex
	idle []*isolation.MountNamespace
	// hung holds, per volume and kind of call, the runner of its call
	// given up on, closed, until that call returns. A detach is not
	// refused because an attach of the volume hangs: unplugging a volume
	// whose storage died must still work, and an unmount asks the
	// filesystem nothing.
	hung map[hungKey]hungCall
	// noThread is why the last runner could not be started; nil once one
	// was.
	noThread error
}

type hungKey struct {
	volume growKey
	what   string
}

type hungCall struct {
	ns    *isolation.MountNamespace
	since time.Time
}

func newStorageCalls(nsPath string, timeout time.Duration) *storageCalls {
	return &storageCalls{nsPath: nsPath, timeout: timeout, limit: heldLimit, hung: map[hungKey]hungCall{}}
}

// run runs fn, the volume k's call, on a runner of its own. It refuses at
// once, with an error wrapping hotplug.ErrStuck, while an earlier call of
// the volume given up on has not returned, and while heldLimit threads are
// held.
func (c *storageCalls) run(k growKey, what string, fn func(ns *isolation.MountNamespace) error) error {
	hk := hungKey{k, what}
	ns, err := c.take(hk)
	if err != nil {
		return err
	}
	err = fn(ns)
	c.give(hk, ns)
	return err
}

// take returns an idle runner, or a new one, for a call of k.
func (c *storageCalls) take(k hungKey) (*isolation.MountNamespace, error) {
	what := k.what
	c.mu.Lock()
	defer c.mu.Unlock()
	held := c.heldLocked()
	if h, ok := c.hung[k]; ok {
		return nil, fmt.Errorf("%w: %s of volume %q: a call given up on at %s has not returned; its storage is not asked again until it does",
			hotplug.ErrStuck, what, k.volume.name, h.since.UTC().Format(time.RFC3339))
	}
	if held >= c.limit {
		return nil, fmt.Errorf("%w: %s of volume %q: %d calls given up on still hold their threads (at most %d): no thread is spent on storage until one returns",
			hotplug.ErrStuck, what, k.volume.name, held, c.limit)
	}
	if n := len(c.idle); n > 0 {
		ns := c.idle[n-1]
		c.idle = c.idle[:n-1]
		ns.SetTimeout(c.timeout)
		return ns, nil
	}
	ns, err := isolation.OpenMountNamespace(c.nsPath)
	if err != nil {
		c.noThread = err
		return nil, fmt.Errorf("%s of volume %q: no thread in the host mount namespace: %w", what, k.volume.name, err)
	}
	c.noThread = nil
	ns.SetTimeout(c.timeout)
	return ns, nil
}

// give takes ns back after a call of k: to the idle pool, or, when a call
// on it was given up on, as k's hung runner, closed so that only the
// stuck thread stays.
func (c *storageCalls) give(k hungKey, ns *isolation.MountNamespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ns.Held() > 0 {
		ns.Close()
		c.hung[k] = hungCall{ns: ns, since: time.Now()}
		return
	}
	if len(c.idle) >= idleRunners {
		ns.Close()
		return
	}
	c.idle = append(c.idle, ns)
}

// heldLocked forgets the hung calls that returned and counts the threads
// the others hold.
func (c *storageCalls) heldLocked() int {
	n := 0
	for k, h := range c.hung {
		held := h.ns.Held()
		if held == 0 {
			delete(c.hung, k)
		}
		n += held
	}
	return n
}

// held is how many threads calls given up on hold now.
func (c *storageCalls) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldLocked()
}

// liveness is Liveness of these calls at now: no thread could be started,
// or a call given up on has been stuck past limit where a signal reaches
// it.
func (c *storageCalls) liveness(what string, limit time.Duration, now time.Time) error {
	c.mu.Lock()
	noThread := c.noThread
	runners := make([]*isolation.MountNamespace, 0, len(c.hung))
	for _, h := range c.hung {
		runners = append(runners, h.ns)
	}
	c.mu.Unlock()
	if noThread != nil {
		return fmt.Errorf("no thread in the host mount namespace runs %s: %w", what, noThread)
	}
	for _, ns := range runners {
		calls, _ := ns.StuckCalls()
		if err := stuckPast(calls, limit, now); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// close ends the idle runners; the hung ones end when their calls return.
func (c *storageCalls) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ns := range c.idle {
		ns.Close()
	}
	c.idle = nil
}

// onStorage runs fn, the volume k's call, with the engine's hands on a
// runner of c (storageCalls.run).
func onStorage[T any](e *Engine, c *storageCalls, k growKey, what string, fn func(h hands) (T, error)) (T, error) {
	var out T
	err := c.run(k, what, func(ns *isolation.MountNamespace) error {
		var err error
		out, err = fn(e.handsOn(ns))
		return err
	})
	return out, err
}

// hands are the engine's node-changing parts bound to one runner.
type hands struct {
	ns       *isolation.MountNamespace
	attacher *mount.Attacher
	nodes    *blockdev.Nodes
	grower   *grow.Grower
}

// handsOn binds the engine's attacher, block nodes and grower to ns.
func (e *Engine) handsOn(ns *isolation.MountNamespace) hands {
	a, n, g := *e.attacher, *e.nodes, *e.grower
	a.NS, n.NS, g.NS = ns, ns, ns
	return hands{ns: ns, attacher: &a, nodes: &n, grower: &g}
}
