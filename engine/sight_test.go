// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestSightMemo: the launcher is asked again whenever the bind on a target
// is not the one it was seen to receive, including a bind that somebody
// else put there and that got the replaced bind's freed mount id back.
func TestSightMemo(t *testing.T) {
	k := growKey{types.UID("launcher"), "fs"}
	seen := entryKey{mountID: 812, source: "7:3 /disk.img"}
	for _, tt := range []struct {
		name string
		put  entryKey
		ask  entryKey
		want bool
	}{
		{"the bind seen", seen, seen, true},
		{"a new bind", seen, entryKey{mountID: 813, source: seen.source}, false},
		{"the freed id reused by another source", seen, entryKey{mountID: 812, source: "7:9 /disk.img"}, false},
		{"the same device, another file", seen, entryKey{mountID: 812, source: "7:3 /other.img"}, false},
		{"a bind not yet read from mountinfo", seen, entryKey{}, false},
		{"an attach is not remembered", entryKey{}, entryKey{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var m sightMemo
			m.put(k, tt.put)
			if got := m.has(k, tt.ask); got != tt.want {
				t.Fatalf("has(%+v) after put(%+v) = %v, want %v", tt.ask, tt.put, got, tt.want)
			}
			m.forget(k)
			if m.has(k, tt.put) {
				t.Fatalf("has after forget")
			}
		})
	}
}
