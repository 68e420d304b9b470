// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"testing"

	"github.com/hpmount/hpmount/hotplug"
)

// TestInspectionsCoverKinds holds diag's half of the kinds table to
// hotplug's: an inspection for each kind, and none for a mode no kind has.
func TestInspectionsCoverKinds(t *testing.T) {
	all := hotplug.Kinds()
	for _, k := range all {
		if inspections[k.Mode] == nil {
			t.Errorf("kind %q has no inspection", k.Mode)
		}
	}
	if len(inspections) != len(all) {
		t.Errorf("diag inspects %d kinds, hotplug has %d", len(inspections), len(all))
	}
}

// TestModeColumn: the table's MODE column names each kind as before the
// kinds table, and a mode no kind has as fs.
func TestModeColumn(t *testing.T) {
	for mode, want := range map[string]string{"Filesystem": "fs", "Block": "block", "Directory": "dir", "": "fs", "Tape": "fs"} {
		if got := volumeRow(&Volume{Mode: mode}, false)[2]; got != want {
			t.Errorf("mode %q: column %q, want %q", mode, got, want)
		}
	}
}
