// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/propagation"
)

// TestForgetLauncher: a launcher that holds nothing any more is dropped
// from every memo, and no other launcher's volume is.
func TestForgetLauncher(t *testing.T) {
	var e Engine
	gone, kept := types.UID("gone"), types.UID("kept")
	entry := entryKey{mountID: 812, source: "7:3 /disk.img"}
	for _, l := range []types.UID{gone, kept} {
		for _, vol := range []string{"fs", "blk"} {
			k := growKey{l, vol}
			e.memo.remember(k, grown{mountID: 812, result: hotplug.GrowResult{}})
			e.sight.put(k, entry)
			e.held.put(k, entry)
			e.held.remember(k, []propagation.Bound{{}})
		}
	}
	e.forgetLauncher(gone)
	for _, l := range []types.UID{gone, kept} {
		for _, vol := range []string{"fs", "blk"} {
			k := growKey{l, vol}
			_, grew := e.memo.recall(k, grown{mountID: 812})
			got := []bool{grew, e.sight.has(k, entry), e.held.has(k, entry), len(e.held.binds(k)) > 0}
			for i, what := range []string{"growth", "sight", "held", "former binds"} {
				if want := l == kept; got[i] != want {
					t.Errorf("%s of %s/%s remembered = %v, want %v", what, l, vol, got[i], want)
				}
			}
		}
	}
}
