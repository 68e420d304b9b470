// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package deps

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hpmount/hpmount/"

// rule forbids packages matching From to depend, directly or not, on any
// package matching one of Never. A pattern is a package path relative to
// the module; "x/..." also matches everything below x.
type rule struct {
	From  []string
	Never []string
	Why   string
}

var rules = []rule{
	{[]string{"isolation"}, []string{"..."}, "isolation is the bottom layer: it imports no project package"},
	{[]string{"podcgroup"}, []string{"..."}, "podcgroup finds cgroups and processes; it knows nothing else of the project"},
	{[]string{"mountinfo"}, []string{"..."}, "mountinfo parses the kernel's mount table; it imports nothing of the project"},
	{[]string{"propagation"}, []string{"mount"}, "propagation reads mount tables through mountinfo, never through the mounting code"},
	{[]string{"mount"}, []string{"kubelet", "kubevirt"}, "mount makes and reads the targets it is told of; the kubelet package names them, through the engine"},
	{[]string{"grow"}, []string{"kubevirt", "hotplug"}, "grow grows the target it is told of; the volume's kind and the engine's contract are package engine's, which translates grow.Result"},
	{[]string{"mount", "mountinfo", "mountwatch", "blockdev", "grow", "kubelet", "kubevirt", "outcome", "propagation", "isolation", "podcgroup"},
		[]string{"agent", "diag", "metrics", "engine", "cmd/..."}, "the node-side building blocks never reach up to the control loop, diag or metrics"},
	{[]string{"mount", "mountwatch", "blockdev", "kubelet", "kubevirt", "outcome", "propagation", "hotplug", "agent", "metrics", "cli", "diag/storage"},
		[]string{"grow"}, "growth is the engine's to run: only package engine imports grow, and diag for the words of what engine.View measures (Result, SlackBytes)"},
	{[]string{"kubelet"}, []string{"mount", "mountinfo", "blockdev", "kubevirt", "propagation"}, "kubelet knows paths, not what is done with them"},
	{[]string{"kubevirt"}, []string{"mount", "blockdev", "propagation"}, "kubevirt judges objects; it never touches the node"},
	{[]string{"diag"}, []string{"agent", "metrics"}, "diag judges the node through the engine's read-only engine.View and shares the agent's rules through kubevirt, kubelet and hotplug, never through the controller"},
	{[]string{"agent"}, []string{"mount", "mountinfo", "mountwatch", "blockdev", "engine", "diag", "propagation", "podcgroup"}, "the agent reaches the node only through its Engine"},
	{[]string{"engine"}, []string{"agent", "diag", "metrics"}, "the engine implements the contract of package hotplug; it never imports the control loop"},
	{[]string{"hotplug"}, []string{"agent", "engine", "diag", "metrics", "mount", "mountinfo", "mountwatch", "blockdev", "propagation", "podcgroup"}, "hotplug is the contract's words and the kinds table: above kubevirt, kubelet and outcome only, below the engine and the agent"},
	{[]string{"..."}, []string{"cmd/..."}, "nothing imports a command"},
}

// graph maps each package (relative to the module) to its transitive
// project dependencies.
type graph map[string][]string

// loadGraph asks go list for the non-test import graph of the module.
func loadGraph(t *testing.T) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "github.com/hpmount/hpmount/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	return parseGraph(out)
}

func parseGraph(out []byte) graph {
	g := graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(fields[0], module)
		g[pkg] = []string{}
		for _, d := range fields[1:] {
			if strings.HasPrefix(d, module) {
				g[pkg] = append(g[pkg], strings.TrimPrefix(d, module))
			}
		}
	}
	return g
}

func match(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, pkg) })
}

// violations lists every dependency that breaks a rule.
func violations(g graph, rules []rule) []string {
	var out []string
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		for _, r := range rules {
			if !matchAny(r.From, pkg) {
				continue
			}
			for _, dep := range g[pkg] {
				if dep != pkg && matchAny(r.Never, dep) {
					out = append(out, fmt.Sprintf("%s depends on %s: %s", pkg, dep, r.Why))
				}
			}
		}
	}
	return out
}

func TestDependencyRules(t *testing.T) {
	g := loadGraph(t)
	for _, want := range []string{"agent", "diag", "kubelet", "kubevirt", "engine", "mount", "grow", "mountinfo", "blockdev", "isolation", "cmd/hpmount"} {
		if _, ok := g[want]; !ok {
			t.Fatalf("go list did not report package %q; got %v", want, g)
		}
	}
	for _, v := range violations(g, rules) {
		t.Error(v)
	}
}

// TestRulesCatchViolations proves that each rule fails on the dependency
// it guards, on a made-up graph.
func TestRulesCatchViolations(t *testing.T) {
	for _, tc := range []struct{ from, dep string }{
		{"isolation", "kubelet"},
		{"mountinfo", "isolation"},
		{"propagation", "mount"},
		{"mount", "kubelet"},
		{"mount", "kubevirt"},
		{"agent", "mountinfo"},
		{"mount", "agent"},
		{"blockdev", "metrics"},
		{"kubevirt", "diag"},
		{"kubelet", "mount"},
		{"kubevirt", "blockdev"},
		{"diag", "agent"},
		{"diag", "metrics"},
		{"agent", "mount"},
		{"agent", "blockdev"},
		{"metrics", "cmd/hpmount"},
		{"engine", "agent"},
		{"hotplug", "engine"},
		{"hotplug", "mount"},
		{"grow", "kubevirt"},
		{"grow", "hotplug"},
		{"grow", "engine"},
		{"mount", "grow"},
		{"blockdev", "grow"},
		{"agent", "grow"},
		{"hotplug", "grow"},
	} {
		g := graph{tc.from: {tc.dep}, tc.dep: {}}
		if v := violations(g, rules); len(v) == 0 {
			t.Errorf("%s → %s is not caught", tc.from, tc.dep)
		}
	}
	if v := violations(graph{"agent": {"kubevirt", "kubelet", "outcome", "hotplug"}, "engine": {"hotplug", "mount", "mountinfo", "blockdev", "grow"},
		"hotplug": {"kubevirt", "kubelet", "outcome"}, "propagation": {"mountinfo"}, "grow": {"mount", "mountinfo", "blockdev", "kubelet", "isolation"},
		"diag": {"engine", "grow", "mount", "blockdev", "kubevirt", "hotplug"}}, rules); len(v) != 0 {
		t.Errorf("allowed dependencies reported: %v", v)
	}
}
