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
	got, more, err := Procs(c, 2)
	if err != nil || more || !slices.Equal(got, []int{10, 11}) {
		t.Fatalf("Procs = %v, %v, %v; want [10 11], no more", got, more, err)
	}
}

// TestProcsBound: a list cut at its bound says there are more, so that a
// caller looking for one process (QEMU) never reads it as absent.
func TestProcsBound(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "kubepods/podabc/ctr1")
	for rel, text := range map[string]string{"kubepods/podabc": "5\n", "kubepods/podabc/ctr1": "10\n11\n"} {
		if err := os.WriteFile(filepath.Join(root, rel, "cgroup.procs"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Find(root, "abc")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		max  int
		want []int
		more bool
	}{
		{1, []int{5}, true},
		{2, []int{5, 10}, true},
		{3, []int{5, 10, 11}, false},
		{4, []int{5, 10, 11}, false},
	} {
		got, more, err := Procs(c, tt.max)
		if err != nil || more != tt.more || !slices.Equal(got, tt.want) {
			t.Errorf("Procs(max %d) = %v, more %v, %v; want %v, more %v", tt.max, got, more, err, tt.want, tt.more)
		}
	}
}
