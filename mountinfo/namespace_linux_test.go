// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestMountPointIn asks, by the namespace's id as package mountwatch
// does, for every mount of the test's own namespace: listmount(2) lists
// as many mounts as /proc/self/mountinfo has, statmount(2) gives each
// the mount point mountinfo shows, and a mount that does not exist is
// ErrMountGone.
func TestMountPointIn(t *testing.T) {
	testutil.RequiresRoot(t)
	ns, err := os.Open("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	id, err := NamespaceID(int(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	infos, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, i := range infos {
		want = append(want, i.MountPoint)
	}
	ids, err := ListMountsIn(id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var buf MountPointBuffer
	for _, m := range ids {
		p, err := MountPointIn(id, m, &buf)
		if err != nil {
			t.Fatalf("mount %d: %v", m, err)
		}
		got = append(got, string(p))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("mount points by statmount %q, by mountinfo %q", got, want)
	}
	if _, err := MountPointIn(id, slices.Max(ids)+1<<20, &buf); !errors.Is(err, ErrMountGone) {
		t.Errorf("a mount that does not exist: %v, want ErrMountGone", err)
	}
}
