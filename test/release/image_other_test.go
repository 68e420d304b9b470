// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package release

import "testing"

// runImage needs runc, which runs on Linux only.
func runImage(t *testing.T, rootfs string, cfg ImageConfig, args ...string) string {
	t.Helper()
	t.Skip("runc runs on Linux only")
	return ""
}
