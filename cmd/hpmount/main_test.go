// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/cli"
	"github.com/hpmount/hpmount/engine"
)

// TestExitStatus: usage and flag errors exit 2, as grep's and diff's do; diag
// keeps 1 for problems found (its ExitError, see cli.Execute) and 2
// for could not run.
func TestExitStatus(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"version"}, 0},
		{[]string{"--version"}, 0},
		{[]string{"version", "-o", "json"}, 0},
		{[]string{"version", "-o", "yaml"}, 2},
		{[]string{"--help"}, 0},
		{[]string{"diag", "--help"}, 0},
		{[]string{"bogus"}, 2},
		{[]string{"version", "extra"}, 2},
		{[]string{"diag", "--bogus"}, 2},
		{[]string{"diag", "-A", "--kube-api-burst=x"}, 2},
		{[]string{"diag", "--cgroup-mode=v3"}, 2},
		{[]string{"diag", "--node-name=n", "-o", "xml"}, 2},
		{[]string{"diag", "--node-name=n", "--kube-api-qps=0"}, 2},
		{[]string{"agent", "extra"}, 2},
		{[]string{"agent", "--node-name=n", "--workers=0"}, 2},
		{[]string{"agent", "--workers=x"}, 2},
		// Valid flags, and no kubeconfig: the agent fails to start (1),
		// diag could not run (2).
		{[]string{"agent", "--node-name=n"}, 1},
		{[]string{"diag", "--node-name=n"}, 2},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			got := cli.Execute(context.Background(), newRootCommand(), tt.args, &out, &errOut)
			if got != tt.want {
				t.Errorf("exit %d, want %d (stderr %q)", got, tt.want, errOut.String())
			}
		})
	}
}

// TestCompletionScripts: cobra's `completion` command prints a script for
// each shell; bash's and zsh's (both installed by make deps) must parse
// with -n. fish and powershell are not on the node images operators use
// here, so their scripts are only checked to be for this command.
func TestCompletionScripts(t *testing.T) {
	for _, tc := range []struct {
		shell string
		parse bool
	}{{"bash", true}, {"zsh", true}, {"fish", false}, {"powershell", false}} {
		t.Run(tc.shell, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := cli.Execute(context.Background(), newRootCommand(), []string{"completion", tc.shell}, &out, &errOut); code != 0 || out.Len() == 0 {
				t.Fatalf("completion %s: exit %d, %d bytes, stderr %q", tc.shell, code, out.Len(), errOut.String())
			}
			if !bytes.Contains(out.Bytes(), []byte("hpmount")) {
				t.Errorf("completion %s does not name hpmount", tc.shell)
			}
			if !tc.parse {
				return
			}
			sh, err := exec.LookPath(tc.shell)
			if err != nil {
				t.Fatalf("%v (make deps installs it)", err)
			}
			path := filepath.Join(t.TempDir(), "hpmount."+tc.shell)
			if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
				t.Errorf("%s -n %s: %v\n%s", tc.shell, path, err, b)
			}
		})
	}
}

// TestCompleteOutput: -o completes to diag's formats.
func TestCompleteOutput(t *testing.T) {
	var out, errOut bytes.Buffer
	cli.Execute(context.Background(), newRootCommand(), []string{"__complete", "diag", "-o", ""}, &out, &errOut)
	for _, f := range []string{"table", "wide", "json", "yaml"} {
		if !strings.Contains(out.String(), f+"\n") {
			t.Errorf("completion of -o lacks %s:\n%s", f, out.String())
		}
	}
}

// TestStartLine: the agent's first line names its build and the settings
// an operator looks for first, in the format --logging-format chose.
func TestStartLine(t *testing.T) {
	var buf bytes.Buffer
	logger, err := cli.LogFlags{Format: cli.LogFormatJSON}.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.Logger, cfg.NodeName = logger, "node-a"
	nc := engine.DefaultConfig()
	logStart(cfg, nc, engine.Features{MountEvents: errors.ErrUnsupported})
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("start line %q: %v", buf.String(), err)
	}
	for _, key := range []string{"version", "revision", "node", "kubeletRoot", "cgroupMode", "kubevirtStateDir", "mountEvents", "resyncPeriod",
		"kernelStatmount", "kernelOpenat2", "kernelMountEvents"} {
		if _, ok := line[key]; !ok {
			t.Errorf("start line lacks %q: %s", key, buf.String())
		}
	}
	if line["kernelStatmount"] != "yes" || line["kernelMountEvents"] != "no: "+errors.ErrUnsupported.Error() {
		t.Errorf("kernel features in the start line: %s", buf.String())
	}
	if line["msg"] != "hpmount agent starting" || line["node"] != "node-a" {
		t.Errorf("start line %s", buf.String())
	}
}
