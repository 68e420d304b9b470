// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import "testing"

func TestNeedsGrowth(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name       string
		device, fs int64
		want       bool
	}{
		{"same size", 400 * mib, 400 * mib, false},
		{"grown by the slack exactly", 400*mib + SlackBytes, 400 * mib, false},
		{"grown by more than the slack", 400*mib + SlackBytes + 1, 400 * mib, true},
		{"grown 400 to 700 MiB", 700 * mib, 400 * mib, true},
		{"tail too small for a block group", 402 * mib, 400 * mib, false},
		{"device smaller: never grow", 300 * mib, 400 * mib, false},
		{"device size unknown", 0, 400 * mib, false},
		{"filesystem size unknown", 700 * mib, 0, false},
		{"negative", -1, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NeedsGrowth(tt.device, tt.fs); got != tt.want {
				t.Errorf("NeedsGrowth(%d, %d) = %v, want %v", tt.device, tt.fs, got, tt.want)
			}
		})
	}
}
