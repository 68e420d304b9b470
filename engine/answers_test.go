// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/hpmount/hpmount/hotplug"
)

// TestSlowStorageStaysStuck (#37, defect 6): storage that answers, but
// later than the deadline, is reported stuck steadily. A probe that came
// back late marks its volume, and the next probe still out is stuck at
// once instead of answering until its own deadline (checked and stuck in
// turn); an answer in time clears the mark.
func TestSlowStorageStaysStuck(t *testing.T) {
	const deadline = 30 * time.Second
	e := &Engine{callTimeout: deadline}
	k := growKey{"launcher", "slow"}
	now := time.Now()
	returned := func(took time.Duration) *probe {
		p := &probe{target: "slow.img", since: now.Add(-took - time.Second), done: make(chan struct{})}
		p.end = p.since.Add(took)
		close(p.done)
		return p
	}
	out := &probe{target: "slow.img", since: now.Add(-time.Second), done: make(chan struct{})}
	judge := func() answers {
		a := answers{stuck: map[string]error{}, answering: map[string]time.Duration{}}
		e.judgeOut(k, "slow", out, a)
		return a
	}
	for _, tc := range []struct {
		name      string
		last      *probe // the volume's last probe, returned
		wantStuck bool
	}{
		{"first probe out", nil, false},
		{"last probe answered late", returned(40 * time.Second), true},
		{"last probe answered in time", returned(time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.last != nil {
				e.answers.put(k, tc.last)
				if p := e.answers.settle(k, deadline); p != nil {
					t.Fatal("a returned probe is still out")
				}
			}
			a := judge()
			if got := errors.Is(a.stuck["slow"], hotplug.ErrStuck); got != tc.wantStuck {
				t.Fatalf("stuck = %v (%v), answering %v; want stuck %v", got, a.stuck["slow"], a.answering["slow"], tc.wantStuck)
			}
			if !tc.wantStuck && a.answering["slow"] <= 0 {
				t.Fatal("neither stuck nor answering")
			}
		})
	}
}
