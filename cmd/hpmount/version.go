// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import "github.com/hpmount/hpmount/cli"

// Set at build time:
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/hpmount
//
// A plain go build leaves them, and build reads the VCS revision Go
// stamped into the binary instead.
var (
	version = "dev"
	commit  = "unknown"
)

// build is what this binary says of itself (version, --version, the user
// agent and hpmount_build_info).
func build() cli.Build { return cli.BuildOf(version, commit) }
