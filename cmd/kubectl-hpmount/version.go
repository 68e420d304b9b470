// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import "github.com/hpmount/hpmount/cli"

// Set at build time, as for cmd/hpmount (the release sets both); a plain
// go build reads the VCS revision Go stamped into the binary instead.
var (
	version = "dev"
	commit  = "unknown"
)

func build() cli.Build { return cli.BuildOf(version, commit) }
