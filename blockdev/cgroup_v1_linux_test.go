// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"testing"
)

func TestParseDevicesList(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		dev     Device
		want    bool
		wantErr bool
	}{
		{"allow all", "a *:* rwm\n", Device{7, 3}, true, false},
		{"exact", "c 1:3 rwm\nb 7:3 rwm\n", Device{7, 3}, true, false},
		{"other minor", "b 7:4 rwm\n", Device{7, 3}, false, false},
		{"wildcard minor", "b 7:* rwm\n", Device{7, 3}, true, false},
		{"char only", "c 7:3 rwm\n", Device{7, 3}, false, false},
		{"read only", "b 7:3 r\n", Device{7, 3}, false, false},
		{"empty: deny all", "", Device{7, 3}, false, false},
		{"garbage", "b 7 rwm\n", Device{}, false, true},
		{"bad type", "x 7:3 rwm\n", Device{}, false, true},
		{"bad number", "b 7:z rwm\n", Device{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := parseDevicesList(tt.list)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && l.allows(tt.dev) != tt.want {
				t.Fatalf("allows(%v) = %v, want %v", tt.dev, !tt.want, tt.want)
			}
		})
	}
}
