// Command hpmount is the node agent of KubeVirt volume hotplug and its
// diagnostics. The commands are thin: flags become a config for a package.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hpmount:", err)
		os.Exit(1)
	}
}
