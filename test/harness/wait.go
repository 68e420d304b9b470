// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StopError ends an Eventually at once: waiting longer cannot help.
type StopError struct{ Err error }

func (e *StopError) Error() string { return e.Err.Error() }

func (e *StopError) Unwrap() error { return e.Err }

// Stop wraps err so that Eventually gives up on it.
func Stop(err error) error { return &StopError{err} }

// Eventually retries f every 100ms until it succeeds, timeout passes, ctx
// ends or f returns a Stop error.
func Eventually(ctx context.Context, what string, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop *StopError
		if errors.As(err, &stop) {
			return fmt.Errorf("%s: %w", what, stop.Err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
