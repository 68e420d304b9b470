// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package harness is the one end-to-end harness of hpmount, shared by the
// end-to-end tests (test/e2e, which wrap it with t.Fatal), the demo
// (test/demo, which narrates around it) and the scale harness: the agent
// binary run as a process against a simulated node, the agent's RBAC bound
// for real, a VM model that plays virt-controller and the kubelet, and the
// waits. Every helper returns an error; none knows about testing.T.
//
// It refuses to judge: what a test expects is the test's.
package harness
