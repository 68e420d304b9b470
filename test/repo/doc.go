// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package repo finds the hpmount checkout that a test or a tool of test/
// runs in, from its working directory: go test runs a test in its
// package's folder, and the Makefile runs the tools from the top.
//
// It owns that one rule, so that nothing relies on source paths compiled
// into the binary: make test builds with -trimpath, which makes those
// paths module-relative (the build cache is then shared with make build
// and the release). It refuses any other module's go.mod on the way up,
// such as test/peer/kubevirt's.
package repo
