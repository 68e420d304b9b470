// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/cli"
)

// TestVersionOfTheBuild builds both commands as an operator would: a
// plain go build in the checkout reports the checked-out revision from
// the build info, and the release's -ldflags are reported as given, by
// --version and by version -o json alike.
func TestVersionOfTheBuild(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	for _, c := range []struct {
		cmd, name, ldflags string
		// version is a prefix: a plain build's is the pseudo-version Go
		// stamps, which ends in the revision's first 12 digits.
		version, revision string
	}{
		{cmd: "hpmount", name: "plain", version: "v", revision: rev},
		{cmd: "hpmount", name: "release", ldflags: "-X main.version=v9.9.9 -X main.commit=abc123", version: "v9.9.9", revision: "abc123"},
		{cmd: "kubectl-hpmount", name: "release", ldflags: "-X main.version=v9.9.9 -X main.commit=abc123", version: "v9.9.9", revision: "abc123"},
	} {
		cmd := c.cmd
		t.Run(cmd+"/"+c.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), cmd)
			build := exec.Command("go", "build", "-buildvcs=true", "-ldflags", c.ldflags, "-o", bin, "../cmd/"+cmd)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v: %s", err, out)
			}
			text, err := exec.Command(bin, "--version").Output()
			if err != nil {
				t.Fatalf("%s --version: %v", cmd, err)
			}
			for _, want := range []string{"version: " + c.version, "revision: " + c.revision} {
				if !strings.Contains(string(text), want) {
					t.Errorf("%s --version printed %q, want %q in it", cmd, text, want)
				}
			}
			out, err := exec.Command(bin, "version", "-o", "json").Output()
			if err != nil {
				t.Fatalf("%s version -o json: %v", cmd, err)
			}
			var b cli.Build
			if err := json.Unmarshal(out, &b); err != nil || !strings.HasPrefix(b.Version, c.version) || b.Revision != c.revision || b.GoVersion == "" {
				t.Errorf("%s version -o json: %s (%v), want version %q..., revision %q", cmd, out, err, c.version, c.revision)
			}
			if c.name == "plain" && !strings.Contains(b.Version, c.revision[:12]) {
				t.Errorf("%s version %q does not name the revision %s", cmd, b.Version, c.revision[:12])
			}
		})
	}
}
