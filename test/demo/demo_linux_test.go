// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/test/harness"
)

// TestDemo runs `make demo`'s command, built as it is, against the built
// agent: the README's first command is part of make test, and a step whose
// expectation fails fails the test with the demo's own narration.
func TestDemo(t *testing.T) {
	testutil.RequiresRoot(t)
	binary, err := harness.Binary()
	if err != nil {
		t.Fatal(err)
	}
	demo := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", demo, "github.com/hpmount/hpmount/test/demo").CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	out, err := exec.Command(demo, "--binary", binary).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "All steps passed") {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log(lines[len(lines)-1])
}
