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

	"github.com/hpmount/hpmount/cli"
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
			if got := cli.Execute(context.Background(), newRootCommand(), tt.args, &out, &errOut); got != tt.want {
				t.Errorf("exit %d, want %d (stderr %q)", got, tt.want, errOut.String())
			}
		})
	}
}

// TestDiagArgs: the VMIs' namespace is -n, else the kubeconfig context's,
// else default, as hpmount diag chooses; the agent's namespace plays no
// part (TestAgentNamespace).
func TestDiagArgs(t *testing.T) {
	withNS := writeKubeconfig(t, "ns1")
	without := writeKubeconfig(t, "")
	tests := []struct {
		name   string
		flags  cli.KubeFlags
		output string
		all    bool
		want   []string
	}{
		{"the context's namespace", cli.KubeFlags{Kubeconfig: withNS}, "", false, []string{"--namespace=ns1"}},
		{"-n wins", cli.KubeFlags{Kubeconfig: withNS, Namespace: "vms"}, "json", false, []string{"--output=json", "--namespace=vms"}},
		{"no namespace in the context", cli.KubeFlags{Kubeconfig: without}, "", false, []string{"--namespace=default"}},
		{"-A", cli.KubeFlags{Kubeconfig: withNS, Namespace: "vms"}, "", true, []string{"--all-namespaces"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := diagArgs(&tt.flags, tt.output, tt.all)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("diagArgs = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestAgentNamespace: the agent pod is looked for in hpmount-system, or in
// --agent-namespace, never in the context's namespace, which is the VMIs'.
// The API server is not reachable, so the list fails and its error names
// the namespace.
func TestAgentNamespace(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "ns1")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, `namespace "` + cli.DefaultNamespace + `"`},
		{[]string{"--agent-namespace", "agents"}, `namespace "agents"`},
		{[]string{"-n", "vms"}, `namespace "` + cli.DefaultNamespace + `"`},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"diag", "n1", "--kubeconfig", kubeconfig}, tt.args...)
		code := cli.Execute(context.Background(), newRootCommand(), args, &out, &errOut)
		if code != cli.ExitUsage || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d naming %s", args, code, errOut.String(), cli.ExitUsage, tt.want)
		}
	}
}

// writeKubeconfig writes a kubeconfig whose one context names namespace
// ns ("" for none) and a server nothing listens on.
func writeKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	nsLine := ""
	if ns != "" {
		nsLine = "\n    namespace: " + ns
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	text := "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:1\n" +
		"contexts:\n- name: c\n  context:\n    cluster: k\n    user: u" + nsLine + "\nusers:\n- name: u\n  user:\n    token: t\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCompletionBash(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := cli.Execute(context.Background(), newRootCommand(), []string{"completion", "bash"}, &out, &errOut); code != 0 {
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
