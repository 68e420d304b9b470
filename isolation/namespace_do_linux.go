// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"
)

// do runs fn in the namespace and returns its error. Processes that fn
// starts inherit the namespace, since they fork from the joined thread.
//
// Past the timeout, do marks l abandoned and then returns an error
// wrapping ErrStuck: either fn never started (the runner was busy with a
// call stuck before it; fn had no effect and never runs) or fn was
// abandoned while running (its effect is unknown; look again before
// acting on it, and fn's checks of l stop it before its next change).
func (m *MountNamespace) do(l *Live, fn func() error) error {
	c := call{fn: fn, live: l, result: make(chan error, 1)}
	timeout := m.callTimeout()
	expired, stop := m.timer(timeout)
	defer stop()
	for {
		r, err := m.current()
		if err != nil {
			return err
		}
		select {
		case r.calls <- c:
			return m.wait(r, c, expired, timeout)
		case <-r.retired:
			continue // written off meanwhile: hand fn to its successor
		case <-m.done:
			return ErrClosed
		case <-expired:
			// The runner never took c (the send did not happen), so fn
			// can no longer start: nothing will receive c again.
			l.abandon()
			return fmt.Errorf("mount namespace %q: %w: the call did not start within %s", m.path, ErrStuck, timeout)
		}
	}
}

// timer is the deadline of a call that starts now: a channel that fires
// after d (nil, never, for 0) and a function that releases it. Tests
// replace it through m.clock to decide when each deadline passes.
func (m *MountNamespace) timer(d time.Duration) (<-chan time.Time, func()) {
	if m.clock != nil {
		return m.clock(d)
	}
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

func (m *MountNamespace) wait(r *runner, c call, expired <-chan time.Time, timeout time.Duration) error {
	start := time.Now()
	select {
	case err := <-c.result:
		return err
	case <-expired:
		// Before anything else: a Check by fn from now on must fail.
		c.live.abandon()
		if err := m.retire(r, start); err != nil {
			return fmt.Errorf("mount namespace %q: %w after %s, and no new thread: %w", m.path, ErrStuck, timeout, err)
		}
		return fmt.Errorf("mount namespace %q: %w: abandoned after %s", m.path, ErrStuck, timeout)
	}
}

func (m *MountNamespace) callTimeout() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.timeout
}

// current is the runner that takes calls now. After a failed attempt to
// replace a written-off runner it tries again, and fails at once while no
// thread can be started: the written-off runner never takes a call again.
func (m *MountNamespace) current() (*runner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.noThread != nil {
		next, err := m.start()
		if err != nil {
			m.noThread = err
			return nil, fmt.Errorf("mount namespace %q: no thread to run the call: %w", m.path, err)
		}
		m.cur, m.noThread = next, nil
	}
	return m.cur, nil
}

// retire writes off r, stuck in a call since start, and starts its
// successor. Of several callers that time out on one runner, the first
// retires it.
func (m *MountNamespace) retire(r *runner, start time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.written++
	if m.cur != r {
		return nil
	}
	m.stuck[r] = start
	close(r.retired)
	next, err := m.start()
	if err != nil {
		m.noThread = err
		return err
	}
	m.cur = next
	return nil
}

// Health reports how many calls were abandoned so far and how long the
// oldest abandoned call that has still not returned has been stuck.
func (m *MountNamespace) Health(now time.Time) (abandoned uint64, stuckFor time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, since := range m.stuck {
		stuckFor = max(stuckFor, now.Sub(since))
	}
	return m.written, stuckFor
}

// Held is how many threads calls given up on still hold: calls abandoned
// past their deadline that have not returned, also after Close.
func (m *MountNamespace) Held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.stuck)
}

// StuckCalls lists the abandoned calls that have not returned yet, oldest
// first, with the state of the thread each holds, and why no thread could
// be started in the namespace to replace the last written-off one (nil
// while a thread serves calls).
func (m *MountNamespace) StuckCalls() ([]StuckCall, error) {
	m.mu.Lock()
	calls := make([]StuckCall, 0, len(m.stuck))
	for r, since := range m.stuck {
		calls = append(calls, StuckCall{Since: since, TID: r.tid})
	}
	noThread := m.noThread
	m.mu.Unlock()
	for i := range calls {
		calls[i].State = threadState(calls[i].TID)
	}
	slices.SortFunc(calls, func(a, b StuckCall) int { return a.Since.Compare(b.Since) })
	return calls, noThread
}

// threadState is the state letter of one of the process's threads in
// /proc/self/task/<tid>/stat ("pid (comm) S ..."; comm may hold any
// byte, so the state follows the last ')'), 0 when it cannot be read.
func threadState(tid int) byte {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Path is the namespace file this runner joined.
func (m *MountNamespace) Path() string { return m.path }

// Close ends the threads. Calls already running finish first.
func (m *MountNamespace) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
}
