// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolveRootFollowsALinkedRoot(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	mustOK(t, err)
	real := filepath.Join(dir, "data", "kubelet")
	mustOK(t, os.MkdirAll(filepath.Join(real, "pods"), 0o755))
	link := filepath.Join(dir, "var-lib-kubelet")
	mustOK(t, os.Symlink(real, link))

	r, err := ResolveRoot(nil, link+"/")
	mustOK(t, err)
	if r.Path != real || r.Configured != link {
		t.Fatalf("ResolveRoot(%q) = %+v, want Path %q, Configured %q", link, r, real, link)
	}
	if _, err := ResolveRoot(nil, "relative/kubelet"); err == nil {
		t.Fatal("ResolveRoot accepted a relative root")
	}
	if _, err := ResolveRoot(nil, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("ResolveRoot accepted a missing root")
	}
}

func TestLauncherDirs(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	mustOK(t, err)
	r := Root{Path: dir, Configured: dir}
	got, err := LauncherDirs(r)
	if err != nil || got != nil {
		t.Fatalf("LauncherDirs without a pods dir = %v, %v; want nothing", got, err)
	}
	mustOK(t, os.MkdirAll(filepath.Join(dir, HotplugDisksDir("a")), 0o755))
	mustOK(t, os.MkdirAll(filepath.Join(dir, HotplugDisksDir("b")), 0o755))
	mustOK(t, os.WriteFile(filepath.Join(dir, HotplugDisksDir("b"), "x.img"), nil, 0o644))
	mustOK(t, os.MkdirAll(filepath.Join(dir, VolumesDir("not-a-launcher")), 0o755))
	got, err = LauncherDirs(r)
	mustOK(t, err)
	want := []LauncherDir{{UID: "a", Empty: true}, {UID: "b", Empty: false}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("LauncherDirs = %+v, want %+v", got, want)
	}
}
