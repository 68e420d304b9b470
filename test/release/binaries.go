// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinaryName is the file name of command c built for p.
func BinaryName(c string, p Platform) string {
	name := c + "-" + p.OS + "-" + p.Arch
	if p.OS == "windows" {
		name += ".exe"
	}
	return name
}

// buildEnv are the variables that change what go build writes; each is
// set here, whatever the caller's environment says. GOFLAGS is cleared so
// that a -race or -cover there cannot slip into a release.
var buildEnv = []string{"GOOS", "GOARCH", "CGO_ENABLED", "GOFLAGS", "GOAMD64", "GOARM64", "GOEXPERIMENT", "GOTOOLCHAIN"}

// buildBinary builds ./cmd/c for p into OutDir. -trimpath drops local
// paths, -buildid= the build ID that hashes them, -buildvcs=false the VCS
// stamp (Commit says the revision); -s -w drop the symbol and DWARF tables,
// not the module list that debug/buildinfo reads.
func buildBinary(ctx context.Context, opts Options, c string, p Platform) (string, error) {
	out, err := filepath.Abs(filepath.Join(opts.OutDir, BinaryName(c, p)))
	if err != nil {
		return "", err
	}
	ldflags := fmt.Sprintf("-s -w -buildid= -X main.version=%s -X main.commit=%s", opts.Version, opts.Commit)
	cmd := exec.CommandContext(ctx, goCommand(opts), "build", "-trimpath", "-buildvcs=false",
		"-ldflags", ldflags, "-o", out, "./cmd/"+c)
	cmd.Dir = opts.RepoDir
	cmd.Env = append(withoutVars(os.Environ(), buildEnv),
		"GOOS="+p.OS, "GOARCH="+p.Arch, "CGO_ENABLED=0", "GOFLAGS=",
		"GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s for %s: %w: %s", c, p, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func goCommand(opts Options) string {
	if opts.Go != "" {
		return opts.Go
	}
	return "go"
}

func withoutVars(env, names []string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			kept = append(kept, kv)
		}
	}
	return kept
}
