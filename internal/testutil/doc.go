// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package testutil holds what the root tests of every package share: the
// requiresRoot rule, a private mount namespace for the whole test binary,
// loop devices with real ext4 and xfs filesystems, and launcher-like
// processes that see the host through a slave mount namespace.
//
// The primitives themselves live once in internal/sandbox; this package
// wraps them with testing.TB. It is imported only from _test.go files.
package testutil
