// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package parity holds the test that keeps diag honest: for the same API
// objects and the same kubelet tree, `hpmount diag` reports a volume as
// refused exactly when the agent refuses it, with the same reason code.
// Both sides are real: the agent runs with the node engine in a private
// mount namespace, diag runs its Run; only the API is a fake clientset,
// since what is compared is the judgement of objects, not RBAC or
// selectors.
package parity
