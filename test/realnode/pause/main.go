// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command pause is the real node's sandbox image: PID 1 of every pod, which
// reaps the children the kernel gives it and exits on SIGTERM or SIGINT. It
// is built static (CGO_ENABLED=0) and packed by test/realnode, so the node
// needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
