// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"
	"time"
)

// kickObserver tells a test that a reconcile finished, so it can look at
// the fake engine again instead of sleeping: each Reconciled leaves one
// pending kick (it never blocks, as Observer requires).
type kickObserver struct {
	NopObserver
	kicks chan struct{}
}

var _ Observer = (*kickObserver)(nil)

func newKickObserver() *kickObserver { return &kickObserver{kicks: make(chan struct{}, 1)} }

func (o *kickObserver) Reconciled(time.Duration) {
	select {
	case o.kicks <- struct{}{}:
	default:
	}
}

// waitUntil rechecks ok after every reconcile until it holds. within only
// detects a hang: it is far longer than the waits it bounds.
func (o *kickObserver) waitUntil(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	hang := time.After(within)
	for !ok() {
		select {
		case <-o.kicks:
		case <-hang:
			t.Fatalf("no %s within %s", what, within)
		}
	}
}

// count is how many recorded calls start with prefix.
func (f *fakeEngine) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}
