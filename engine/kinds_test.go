// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"testing"

	"github.com/hpmount/hpmount/hotplug"
)

// TestKindsTable holds the engine's half of the kinds table to hotplug's:
// one engine kind for each kind, carrying that kind's facts, and none else.
func TestKindsTable(t *testing.T) {
	all := hotplug.Kinds()
	if len(kinds) != len(all) {
		t.Errorf("the engine has %d kinds, hotplug %d", len(kinds), len(all))
	}
	for _, f := range all {
		k, err := kindOf(f.Mode)
		if err != nil {
			t.Fatalf("kindOf(%q): %v", f.Mode, err)
		}
		var got hotplug.Kind
		switch k := k.(type) {
		case fileKind:
			got = k.Kind
		case dirKind:
			got = k.Kind
		case blockKind:
			got = k.Kind
		}
		if got.Mode != f.Mode || got.Short != f.Short {
			t.Errorf("kindOf(%q) carries the facts of %q", f.Mode, got.Mode)
		}
	}
	if _, err := kindOf("Tape"); !errors.Is(err, errUnknownKind) {
		t.Errorf("kindOf(Tape) = %v, want errUnknownKind", err)
	}
}
