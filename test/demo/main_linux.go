// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hpmount/hpmount/test/simnode"
)

func main() {
	// Catch Ctrl-C before re-running: the terminal sends it to the whole
	// process group, and the waiting parent must outlive the child's cleanup.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	simnode.ReexecInPrivateNamespace()

	binary := flag.String("binary", "", "the hpmount binary to demonstrate (e.g. bin/hpmount)")
	rbac := flag.String("rbac", "", "RBAC manifest of the agent (default: deploy/rbac.yaml of the enclosing repository)")
	flag.Parse()
	os.Exit(run(ctx, *binary, *rbac))
}

// run is the whole demo; its result is the exit status.
func run(ctx context.Context, binary, rbac string) int {
	start := time.Now()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: needs root (real mounts, loop devices and device cgroups)")
		return 2
	}
	var err error
	if binary, err = checkBinary(binary); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	d, err := newDemo(ctx, binary)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	err = d.run(rbac)
	interrupted := err != nil && ctx.Err() != nil
	if err != nil && !interrupted {
		d.failed(err)
	}
	d.close(err == nil || interrupted)
	switch {
	case interrupted:
		fmt.Println("\nInterrupted; everything was cleaned up.")
		return 130
	case err != nil:
		fmt.Printf("\nDEMO FAILED after %s: %v\n", time.Since(start).Round(time.Second), err)
		return 1
	}
	fmt.Printf("\nAll steps passed in %s; everything was cleaned up.\n", time.Since(start).Round(time.Second))
	return 0
}

func checkBinary(binary string) (string, error) {
	if binary == "" {
		return "", errors.New("--binary is required: the hpmount binary (`make build` writes bin/hpmount)")
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		return "", fmt.Errorf("binary %q: %w", binary, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("binary %q: %w (run `make build`)", abs, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("binary %q is not an executable file", abs)
	}
	return abs, nil
}
