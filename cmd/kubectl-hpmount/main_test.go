// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/plugin"
)

// TestExitStatus: usage errors exit 2 before any API call; an agent pod
// that cannot be found or reached is diag's "could not run", 2.
func TestExitStatus(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, 0},
		{[]string{"diag", "--help"}, 0},
		{[]string{"diag"}, 2},
		{[]string{"diag", "--", "-o", "json"}, 2},
		{[]string{"diag", "--bogus", "n1"}, 2},
		{[]string{"bogus"}, 2},
		{[]string{"diag", "n1"}, 2},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := plugin.Execute(context.Background(), newRootCommand(), tt.args, &out, &errOut); got != tt.want {
				t.Errorf("exit %d, want %d (stderr %q)", got, tt.want, errOut.String())
			}
		})
	}
}

func TestDiagArgs(t *testing.T) {
	tests := []struct {
		output, ns string
		all        bool
		want       []string
	}{
		{want: []string{"--all-namespaces"}},
		{output: "json", ns: "vms", want: []string{"--output=json", "--namespace=vms"}},
		{ns: "vms", all: true, want: []string{"--all-namespaces"}},
	}
	for _, tt := range tests {
		if got := diagArgs(tt.output, tt.ns, tt.all); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("diagArgs(%q, %q, %v) = %q, want %q", tt.output, tt.ns, tt.all, got, tt.want)
		}
	}
}

func TestCompletionBash(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := plugin.Execute(context.Background(), newRootCommand(), []string{"completion", "bash"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	path := filepath.Join(t.TempDir(), "kubectl-hpmount.bash")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, b)
	}
}
