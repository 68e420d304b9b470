// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"fmt"
	"time"

	"github.com/hpmount/hpmount/isolation"
)

// DefaultCallTimeout is the deadline of one look at the node when
// Options.CallTimeout is 0: long enough for a loaded node's stat or /proc
// read, short enough that a node with a few hung volumes is diagnosed in
// a minute.
const DefaultCallTimeout = 5 * time.Second

// errStuck is wrapped by a look at the node made outside the host mount
// namespace (bounded) that did not answer within the call timeout.
var errStuck = errors.New("no answer within the call timeout: abandoned")

// stuck reports whether err is a look at the node abandoned past its
// deadline: one of bounded's, or one in the host mount namespace
// (isolation.ErrStuck, from the namespace's own timeout).
func stuck(err error) bool {
	return errors.Is(err, errStuck) || errors.Is(err, isolation.ErrStuck)
}

// lookingAt names the look that an error of the host mount namespace's
// deadline was abandoned in, which that error does not say; bounded's own
// errors already name theirs.
func lookingAt(what string, err error) error {
	if stuck(err) && !errors.Is(err, errStuck) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
}

// bounded runs fn on a goroutine of its own and waits at most d for it.
// Past d it returns an error wrapping errStuck and leaves fn behind: a
// syscall blocked in the kernel (a stat on a hard-mounted NFS volume whose
// server is gone, a lookup on a hung FUSE filesystem) cannot be called
// back, so the goroutine, and the OS thread under it, stays blocked until
// the filesystem answers or diag exits. fn's value comes back through a
// buffered channel, as isolation.Call's does, so an abandoned fn writes
// nowhere the caller reads.
func bounded[T any](d time.Duration, what string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	out := make(chan result, 1)
	go func() {
		v, err := fn()
		out <- result{v, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-out:
		return r.v, r.err
	case <-t.C:
		var zero T
		return zero, fmt.Errorf("%s: %w after %s", what, errStuck, d)
	}
}
