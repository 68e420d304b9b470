// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/sandbox"
)

// MountHangingFS mounts a sandbox.HangingFS on dir (storage whose server
// stops answering at Hang) and aborts and unmounts it when the test ends.
func MountHangingFS(t testing.TB, dir string) *sandbox.HangingFS {
	t.Helper()
	fs, err := sandbox.MountHangingFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fs.Abort()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	return fs
}
