// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package sandbox holds the few primitives every root test, the simulated
// node, the demo and the scale harness share, once, error-returning:
// re-running the program in a private mount namespace, a launcher-like
// process in a slave mount namespace, and loop devices with or without a
// filesystem. internal/testutil wraps them for tests; test/simnode builds
// the node on them.
//
// It also serves a FUSE filesystem that stops answering on demand
// (HangingFS), the hung storage of the fault tests.
//
// It refuses anything about hpmount itself: no kubelet paths, no API.
package sandbox
