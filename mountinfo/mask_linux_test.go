// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"errors"
	"testing"
)

// TestMaskRetriesAFailedProbe: a probe of the kernel that fails once (a
// transient error) is asked again by the next read, not kept for the life
// of the process, which made every later ReadBeneath, and so every
// Observe, fail while liveness stayed green.
func TestMaskRetriesAFailedProbe(t *testing.T) {
	if err := CheckStatmount(); err != nil {
		t.Skipf("no statmount here: %v", err)
	}
	saved := probeMask
	t.Cleanup(func() { probeMask = saved; statMask.mask.Store(0) })
	statMask.mask.Store(0)
	fail := true
	probeMask = func() (uint64, error) {
		if fail {
			fail = false
			return 0, errors.New("a transient failure")
		}
		return saved()
	}
	if _, err := mask(); err == nil {
		t.Fatal("mask with a failing probe: no error")
	}
	m, err := mask()
	if err != nil || m == 0 {
		t.Fatalf("mask after a failed probe: %#x, %v; want the kernel's mask", m, err)
	}
}
