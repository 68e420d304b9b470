// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package sandbox

// ReexecInPrivateMountNamespace does nothing where there are no mount
// namespaces.
func ReexecInPrivateMountNamespace(string) {}
