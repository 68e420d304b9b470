// Package testutil holds what the root tests of every package share: the
// requiresRoot rule, a private mount namespace for the whole test binary,
// loop devices with real ext4 and xfs filesystems, and launcher-like
// processes that see the host through a slave mount namespace.
//
// It is imported only from _test.go files.
package testutil
