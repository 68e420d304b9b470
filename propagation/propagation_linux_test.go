// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/mountinfo"
)

// TestLauncherViewIsSlave checks real tables: a directory made shared before
// a launcher starts is seen as its master, a private one is explained.
func TestLauncherViewIsSlave(t *testing.T) {
	testutil.RequiresRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(base, "kubelet")
	private := filepath.Join(base, "private")
	late := filepath.Join(base, "shared-too-late")
	for _, d := range []string{shared, private, late} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testutil.MakeShared(t, shared)
	// A mount of its own that stays private (the test namespace is private
	// throughout).
	if err := unix.Mount(private, private, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(private, unix.MNT_DETACH) })
	if err := unix.Mount(late, late, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(late, unix.MNT_DETACH) })
	l := testutil.StartLauncher(t)
	// Shared only after the launcher copied it: the launcher's copy stays
	// private and never receives anything.
	if err := unix.Mount("", late, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}

	host, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	view, err := mountinfo.Parse(strings.NewReader(l.MountInfo(t)))
	if err != nil {
		t.Fatal(err)
	}
	launcher := mountinfo.NewTable(view)

	pods := filepath.Join(shared, "pods")
	if err := CheckShared(host, pods); err != nil {
		t.Fatalf("CheckShared(%q): %v", pods, err)
	}
	if err := CheckSlaveOf(host, launcher, pods, pods); err != nil {
		t.Fatalf("CheckSlaveOf(%q): %v", pods, err)
	}
	err = CheckSlaveOf(host, launcher, private, private)
	var ns *NotSharedError
	if !errors.As(err, &ns) || ns.MountPoint != private || ns.Propagation != "private" {
		t.Fatalf("CheckSlaveOf(%q) = %v, want NotSharedError for the private mount", private, err)
	}
	if !strings.Contains(err.Error(), "mount --make-rshared "+private) {
		t.Fatalf("message lacks the fix: %v", err)
	}
	t.Logf("private: %v", err)

	err = CheckSlaveOf(host, launcher, late, late)
	var nsl *NotSlaveError
	if !errors.As(err, &nsl) || nsl.LauncherPropagation != "private" || nsl.HostShared == 0 {
		t.Fatalf("CheckSlaveOf(%q) = %v, want NotSlaveError for a launcher copy made before sharing", late, err)
	}
	t.Logf("shared too late: %v", err)
}
