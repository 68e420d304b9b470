// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"math"
	"testing"
)

func TestDiskImageSize(t *testing.T) {
	const mib, gib = int64(1 << 20), int64(1 << 30)
	tests := []struct {
		name            string
		capacity        int64
		overhead        float64
		free, allocated int64
		want            int64
		wantErr         bool
	}{
		{"capacity unknown", 0, 0.055, 10 * gib, 0, 0, false},
		{"negative capacity", -1, 0.055, 10 * gib, 0, 0, false},
		{"capacity limits", 10 * gib, 0, 100 * gib, 0, 10 * gib, false},
		{"overhead taken off", 200 * mib, 0.055, 1 * gib, 0, 189 * mib, false},
		{"aligned down to 1 MiB", 100*mib + 12345, 0, 1 * gib, 0, 100 * mib, false},
		{"free space limits", 10 * gib, 0, 3 * gib, 0, 3 * gib, false},
		{"allocation counts as usable", 10 * gib, 0, 3 * gib, 2 * gib, 5 * gib, false},
		{"overhead after the minimum", 10 * gib, 0.5, 3 * gib, 1 * gib, 2 * gib, false},
		{"nothing free, nothing allocated", 10 * gib, 0, 0, 0, 0, false},
		{"negative free ignored", 10 * gib, 0, -5, 4 * gib, 4 * gib, false},
		{"zero overhead", 1 * gib, 0, 2 * gib, 0, 1 * gib, false},
		{"overhead 1", 1 * gib, 1, 2 * gib, 0, 0, true},
		{"negative overhead", 1 * gib, -0.1, 2 * gib, 0, 0, true},
		{"NaN overhead", 1 * gib, math.NaN(), 2 * gib, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DiskImageSize(tt.capacity, tt.overhead, tt.free, tt.allocated)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("DiskImageSize(%d, %v, %d, %d) = %d (%d MiB), want %d (%d MiB)", tt.capacity, tt.overhead,
					tt.free, tt.allocated, got, got>>20, tt.want, tt.want>>20)
			}
			if got%(1<<20) != 0 {
				t.Errorf("%d is not 1 MiB aligned", got)
			}
		})
	}
}
