// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestDeviceSize(t *testing.T) {
	const mib = int64(1 << 20)
	dir := t.TempDir()
	loop := testutil.NewFilesystem(t, "ext4", 64*mib, dir)
	dev := loop.Dev(t)
	got, err := DeviceSize("/sys", unix.Major(dev), unix.Minor(dev))
	if err != nil || got != 64*mib {
		t.Errorf("DeviceSize = %d, %v; want %d", got, err, 64*mib)
	}
	if _, err := DeviceSize(t.TempDir(), 7, 999); err == nil {
		t.Error("DeviceSize of a missing device: no error")
	}
}
