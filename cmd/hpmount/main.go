// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command hpmount is the node agent of KubeVirt volume hotplug and its
// diagnostics. The commands are thin: flags become a config for a package.
// Exit status: 0 success, 1 failure (diag: problems found), 2 usage or flag
// error (diag: could not run).
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
