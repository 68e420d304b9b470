// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPodDirsRemembersAndRevalidates(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := mk("kubepods/burstable/podabc")
	mk("kubepods/burstable/podabc/ctr1")
	var c Finder
	cgs, err := c.Find(root, "abc")
	if err != nil || cgs.Pod != first || len(cgs.Descendants) != 1 {
		t.Fatalf("find = %+v, %v", cgs, err)
	}
	// A container that appears later is seen: the subtree is walked anew.
	mk("kubepods/burstable/podabc/ctr2")
	if cgs, err = c.Find(root, "abc"); err != nil || len(cgs.Descendants) != 2 {
		t.Fatalf("find after a new container = %+v, %v", cgs, err)
	}
	// The pod's cgroup moved (QoS class change on a restart): the
	// remembered directory is gone, so the tree is searched again.
	if err := os.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	second := mk("kubepods/besteffort/podabc")
	if cgs, err = c.Find(root, "abc"); err != nil || cgs.Pod != second {
		t.Fatalf("find after the move = %+v, %v", cgs, err)
	}
	if err := os.RemoveAll(second); err != nil {
		t.Fatal(err)
	}
	if _, err = c.Find(root, "abc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("find of a gone pod = %v, want ErrNotFound", err)
	}
	if _, ok := c.get("abc"); ok {
		t.Fatal("a gone pod stays remembered")
	}
}

func TestPodUIDOf(t *testing.T) {
	for _, tc := range []struct {
		name, uid string
		ok        bool
	}{
		{"pod1234-abcd", "1234-abcd", true},
		{"kubepods-burstable-pod1234_abcd.slice", "1234-abcd", true},
		{"kubelet-kubepods-pod1234_abcd.slice", "1234-abcd", true},
		{"burstable", "", false},
		{"kubepods-burstable.slice", "", false},
		{"pod", "", false},
		{"pod../x", "", false},
	} {
		uid, ok := podUIDOf(tc.name)
		if ok != tc.ok || uid != tc.uid {
			t.Errorf("podUIDOf(%q) = %q, %v; want %q, %v", tc.name, uid, ok, tc.uid, tc.ok)
		}
	}
}

// TestPodDirsIndexesTheTreeOnce: one miss indexes every pod; a pod with two
// cgroups is not indexed, and its lookup still fails as ambiguous.
func TestPodDirsIndexesTheTreeOnce(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"kubepods/burstable/podaaa", "kubepods/besteffort/podbbb", "kubepods/podccc", "other/podccc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var c Finder
	if _, err := c.Find(root, "aaa"); err != nil {
		t.Fatal(err)
	}
	if d, ok := c.get("bbb"); !ok || d != filepath.Join(root, "kubepods/besteffort/podbbb") {
		t.Fatalf("bbb after the first miss = %q, %v; want it indexed", d, ok)
	}
	if _, err := c.Find(root, "ccc"); err == nil {
		t.Fatal("a pod with two cgroups was found")
	}
}

// TestSettledFinderAnswersAsFirstFound: a settled Finder answers every
// Find of a pod, a miss included, as it found it first, and searches for
// another pod on its own.
func TestSettledFinderAnswersAsFirstFound(t *testing.T) {
	root := t.TempDir()
	mk := dirMaker(t, root)
	mk("kubepods/podabc/ctr1")
	c := new(Finder).Settle()
	first, err := c.Find(root, "abc")
	if err != nil || len(first.Descendants) != 1 {
		t.Fatalf("find = %+v, %v", first, err)
	}
	if _, err := c.Find(root, "def"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("find of a missing pod = %v, want ErrNotFound", err)
	}
	mk("kubepods/podabc/ctr2")
	mk("kubepods/poddef")
	for _, tc := range []struct {
		uid     string
		want    *Cgroups
		wantErr error
	}{
		{"abc", first, nil},
		{"def", nil, ErrNotFound},
	} {
		got, err := c.Find(root, tc.uid)
		if got != tc.want || !errors.Is(err, tc.wantErr) {
			t.Errorf("find %s again = %+v, %v; want the first answer", tc.uid, got, err)
		}
	}
	mk("kubepods/podghi")
	if got, err := c.Find(root, "ghi"); err != nil || got.PodUID != "ghi" {
		t.Errorf("find of another pod = %+v, %v", got, err)
	}
}

// TestSettleSharesTheIndex: a Finder from Settle answers a pod as it first
// found it, and the pod directories it found are remembered by the Finder
// it came from, which still walks the subtree anew.
func TestSettleSharesTheIndex(t *testing.T) {
	root := t.TempDir()
	mk := dirMaker(t, root)
	mk("kubepods/podabc/ctr1")
	var c Finder
	pass := c.Settle()
	first, err := pass.Find(root, "abc")
	if err != nil || len(first.Descendants) != 1 {
		t.Fatalf("find = %+v, %v", first, err)
	}
	if dir, ok := c.get("abc"); !ok || dir != filepath.Join(root, "kubepods/podabc") {
		t.Fatalf("the settled pass left %q, %v in the shared index", dir, ok)
	}
	mk("kubepods/podabc/ctr2")
	if again, err := pass.Find(root, "abc"); err != nil || again != first {
		t.Fatalf("the pass found %+v, %v again, want its first answer", again, err)
	}
	if now, err := c.Find(root, "abc"); err != nil || len(now.Descendants) != 2 {
		t.Fatalf("the shared finder found %+v, %v, want the new container", now, err)
	}
}

// dirMaker makes directories below root, parents and all.
func dirMaker(t *testing.T, root string) func(rel string) {
	return func(rel string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSettledFinderReadsProcsOnce: a settled Finder answers a pod's
// processes from its first read, cut to a smaller bound with more said,
// and reads again for a larger bound; a long-lived Finder reads each time.
func TestSettledFinderReadsProcsOnce(t *testing.T) {
	root := t.TempDir()
	dirMaker(t, root)("kubepods/podabc/ctr1")
	procs := filepath.Join(root, "kubepods/podabc/ctr1/cgroup.procs")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(procs, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10\n11\n12\n")
	long := new(Finder)
	settled := long.Settle()
	cgs, err := settled.Find(root, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if got, more, err := settled.Procs(cgs, 3); err != nil || more || !slices.Equal(got, []int{10, 11, 12}) {
		t.Fatalf("first read = %v, more %v, %v", got, more, err)
	}
	write("10\n11\n12\n13\n")
	for _, tc := range []struct {
		name string
		max  int
		want []int
		more bool
	}{
		{"same bound: the first read", 3, []int{10, 11, 12}, false},
		{"smaller bound: the first read, cut", 2, []int{10, 11}, true},
		{"larger bound: read again", 8, []int{10, 11, 12, 13}, false},
	} {
		if got, more, err := settled.Procs(cgs, tc.max); err != nil || more != tc.more || !slices.Equal(got, tc.want) {
			t.Errorf("%s: Procs = %v, more %v, %v; want %v, more %v", tc.name, got, more, err, tc.want, tc.more)
		}
	}
	write("10\n")
	if got, _, err := long.Procs(cgs, 8); err != nil || !slices.Equal(got, []int{10}) {
		t.Fatalf("long-lived Finder's Procs = %v, %v; want the live [10]", got, err)
	}
}
