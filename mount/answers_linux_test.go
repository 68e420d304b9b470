// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOpenBoundOpensOnlyMountedTargets: of the names asked, OpenBound
// opens what is mounted on a target, and passes over a target with no
// mount, a missing one, a name that is not one plain file name and a
// launcher directory that does not exist; Answers reaches the bound file's
// filesystem.
func TestOpenBoundOpensOnlyMountedTargets(t *testing.T) {
	n := newNode(t, "ext4")
	_, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "v.img")
	must(t, err)
	must(t, os.WriteFile(n.path(launchDir, "plain.img"), nil, 0o644))
	files, err := n.a.OpenBound(hostTable(t), launchDir, []string{"v.img", "plain.img", "missing.img", "../v.img", ""})
	must(t, err)
	var got []string
	for name, f := range files {
		got = append(got, name)
		if err := Answers(f); err != nil {
			t.Errorf("answers %s: %v", name, err)
		}
		if filepath.Base(f.Name()) != name {
			t.Errorf("file of %s is named %q", name, f.Name())
		}
		f.Close()
	}
	if slices.Sort(got); !slices.Equal(got, []string{"v.img"}) {
		t.Fatalf("opened %v, want only the mounted target v.img", got)
	}
	if files, err := n.a.OpenBound(hostTable(t), "pods/none/volumes/kubernetes.io~empty-dir/hotplug-disks", []string{"v.img"}); err != nil || len(files) != 0 {
		t.Fatalf("open bound in a missing directory = %v, %v; want nothing", files, err)
	}
}
