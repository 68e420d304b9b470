// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command kubectl-hpmount is the kubectl plugin of hpmount:
// `kubectl hpmount diag NODE [VMI...]` runs diag in that node's agent pod.
// The work is in package cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hpmount/hpmount/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := cli.Execute(ctx, newRootCommand(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
