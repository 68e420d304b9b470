// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseProcs(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     []int
		wantErr  bool
	}{
		{"empty", "", 10, nil, false},
		{"several", "1\n42\n7\n", 10, []int{1, 42, 7}, false},
		{"bounded", "1\n2\n3\n", 2, []int{1, 2}, false},
		{"garbage", "1\nx\n", 10, []int{1}, true},
		{"zero", "0\n", 10, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcs(strings.NewReader(tt.in), tt.max)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Fatalf("ParseProcs(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestProcsPassesOverAGoneContainer(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "kubepods/podabc/ctr1", "kubepods/podabc/ctr2")
	write := func(rel, text string) {
		if err := os.WriteFile(filepath.Join(root, rel, "cgroup.procs"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kubepods/podabc", "")
	write("kubepods/podabc/ctr1", "10\n11\n")
	// ctr2 has no cgroup.procs: it went away between the walk and the read.
	c, err := Find(root, "abc")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Procs(c)
	if err != nil || !slices.Equal(got, []int{10, 11}) {
		t.Fatalf("Procs = %v, %v; want [10 11]", got, err)
	}
}
