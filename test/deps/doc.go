// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package deps holds the test of hpmount's dependency rules (see
// ARCHITECTURE.md): the import graph, derived with `go list`, must keep
// each concern with its one owner.
package deps
