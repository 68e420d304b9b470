// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"errors"
	"sync/atomic"
)

// ErrAbandoned is wrapped by Live.Check once the caller gave up on the
// call: whatever the call would change next, it must not.
var ErrAbandoned = errors.New("the caller gave up on this call")

// Live tells a running call whether its caller still waits for it.
//
// A call abandoned past its deadline (see MountNamespace.Do) goes on
// running on its written-off thread, and whatever it does from then on is
// done from facts its caller no longer holds: the caller may have
// detached the volume the call was attaching, and a replacement call may
// be working on the same target. So a call checks before each syscall
// that changes something, and stops with the error of Check once that is
// not nil. The caller sets the flag before Do returns, so a Check made
// after the caller saw ErrStuck always fails.
//
// A nil *Live is a call nobody gives up on (one run outside a
// MountNamespace, in tests or by a caller already in the namespace):
// its Check always passes.
type Live struct{ abandoned atomic.Bool }

// Check returns nil while the caller waits for the call, and an error
// wrapping ErrAbandoned once it gave up.
func (l *Live) Check() error {
	if l != nil && l.abandoned.Load() {
		return ErrAbandoned
	}
	return nil
}

// abandon marks the call given up; the caller calls it before it returns.
func (l *Live) abandon() { l.abandoned.Store(true) }

// Do runs fn in the namespace and returns its error; it is DoLive for a
// function that changes nothing after a step that can hang, or that
// checks nothing.
func (m *MountNamespace) Do(fn func() error) error {
	return m.do(new(Live), fn)
}

// DoLive runs fn in the namespace as Do does, handing it the Live of the
// call, which fn checks before each change it makes.
func (m *MountNamespace) DoLive(fn func(*Live) error) error {
	l := new(Live)
	return m.do(l, func() error { return fn(l) })
}

// Call runs fn in the namespace as Do does and returns its value too
// (CallLive without the Live).
func Call[T any](m *MountNamespace, fn func() (T, error)) (T, error) {
	return CallLive(m, func(*Live) (T, error) { return fn() })
}

// CallLive runs fn in the namespace as DoLive does and returns its value
// too. The value comes back through a buffered channel, never through a
// variable that fn captures: past the deadline Do returns while an
// abandoned fn still runs, and it must then write nowhere the caller
// reads. A call that did not finish, or that finished only after its
// caller gave up, returns T's zero value with Do's error.
func CallLive[T any](m *MountNamespace, fn func(*Live) (T, error)) (T, error) {
	return CallOwned(m, fn, nil)
}

// CallOwned runs fn as CallLive does, for a value that holds what must be
// let go (open descriptors, which pin their mounts): one made for a
// caller that gave up reaches nobody, and left to the garbage collector
// it kept its mounts busy for as long as the collector waited. Such a
// value is released exactly once, by fn's side or the caller's, whichever
// comes second; a nil release leaves it to the collector.
func CallOwned[T any](m *MountNamespace, fn func(*Live) (T, error), release func(T)) (T, error) {
	out := make(chan T, 1)
	// 0 running; handedOver once fn's value is in out; givenUp once the
	// caller left without it.
	const handedOver, givenUp = 1, 2
	var state atomic.Int32
	l := new(Live)
	err := m.do(l, func() error {
		v, err := fn(l)
		out <- v
		if !state.CompareAndSwap(0, handedOver) && release != nil {
			release(<-out)
		}
		return err
	})
	var zero T
	if l.Check() != nil {
		if !state.CompareAndSwap(0, givenUp) && release != nil {
			release(<-out)
		}
		return zero, err
	}
	select {
	case v := <-out:
		return v, err
	default:
		return zero, err
	}
}
