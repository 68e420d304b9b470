// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadTargetsIsBounded: the launcher can fill hotplug-disks with names;
// the listing passes over names that cannot be volumes and stops at
// MaxTargets.
func TestReadTargetsIsBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range MaxTargets + 100 {
		mustOK(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("v%05d.img", i)), nil, 0o644))
	}
	mustOK(t, os.WriteFile(filepath.Join(dir, strings.Repeat("x", MaxVolumeNameLen+1)), nil, 0o644))
	f, err := os.Open(dir)
	mustOK(t, err)
	defer f.Close()
	got, truncated, err := ReadTargets(f)
	mustOK(t, err)
	if len(got) != MaxTargets || !truncated {
		t.Fatalf("%d entries, truncated %v; want %d, truncated", len(got), truncated, MaxTargets)
	}
	for _, e := range got {
		if len(e.Name()) > MaxVolumeNameLen+len(".img") {
			t.Fatalf("a name that cannot be a volume was listed: %.20q", e.Name())
		}
	}

	small := t.TempDir()
	for _, n := range []string{"a.img", "b", strings.Repeat("y", 250)} {
		mustOK(t, os.WriteFile(filepath.Join(small, n), nil, 0o644))
	}
	g, err := os.Open(small)
	mustOK(t, err)
	defer g.Close()
	got, truncated, err = ReadTargets(g)
	mustOK(t, err)
	if len(got) != 2 || truncated || got[0].Name() != "a.img" || got[1].Name() != "b" {
		t.Fatalf("listing = %v, truncated %v; want a.img and b", got, truncated)
	}
}
