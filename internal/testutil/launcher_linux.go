// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"testing"

	"github.com/hpmount/hpmount/internal/sandbox"
)

// Launcher is a process in a mount namespace of its own whose mounts are
// slaves of the test's namespace, as a virt-launcher container with a
// HostToContainer volume sees the host.
type Launcher struct {
	*sandbox.Process
}

// StartLauncher starts a launcher-like process and kills it when t ends.
func StartLauncher(t testing.TB) *Launcher {
	t.Helper()
	RequiresRoot(t)
	p, err := sandbox.StartSlaveProcess()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &Launcher{p}
}

// Exec runs a shell script inside the launcher's mount namespace.
func (l *Launcher) Exec(t testing.TB, script string) string {
	t.Helper()
	out, err := l.Process.Exec("", script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// MountInfo returns the launcher's own view of the mount table.
func (l *Launcher) MountInfo(t testing.TB) string {
	t.Helper()
	out, err := l.Process.MountInfo()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
