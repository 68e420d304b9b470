// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"testing"
	"time"
)

// TestStuckMemo: a record counts as stuck on a gone target only once the
// same bytes said so for the whole wait; virt-handler working through its
// Unmount (the record changes, or names no gone target any more) starts
// the wait again.
func TestStuckMemo(t *testing.T) {
	m := stuckMemo{after: 2 * time.Minute}
	t0 := time.Unix(1e9, 0)
	for _, step := range []struct {
		at    time.Duration
		raw   string
		stuck string
		want  string
	}{
		{0, "r1", "/a.img", ""},
		{time.Minute, "r1", "/a.img", ""},
		{2 * time.Minute, "r1", "/a.img", "/a.img"},
		{3 * time.Minute, "r2", "/a.img", ""}, // rewritten: wait again
		{5 * time.Minute, "r2", "/a.img", "/a.img"},
		{6 * time.Minute, "r2", "/b.img", ""}, // another target gone
		{7 * time.Minute, "r3", "", ""},       // not stuck: forgotten
		{8 * time.Minute, "r3", "/b.img", ""},
		{8*time.Minute + stuckForget + time.Second, "r3", "/b.img", ""}, // dropped meanwhile: new wait
	} {
		if got := m.settle("vmi", []byte(step.raw), step.stuck, t0.Add(step.at)); got != step.want {
			t.Fatalf("at %v, record %s naming %q gone: stuck %q, want %q", step.at, step.raw, step.stuck, got, step.want)
		}
	}
	if got := (&stuckMemo{}).settle("vmi", nil, "/a.img", t0); got != "/a.img" {
		t.Fatalf("with no wait: stuck %q, want at once", got)
	}
}
