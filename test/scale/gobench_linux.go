// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/hpmount/hpmount/test/repo"
)

// benchCount is how often each Go benchmark runs: median and p99 (the
// slowest of five) come from these runs.
const benchCount = 5

// benchPackages and the benchmarks run in them.
var benchPackages = []struct{ pkg, pattern string }{
	{"./mountinfo", "Mountinfo"},
	{"./mount", "Bind"},
	{"./agent", "NoopReconcile"},
}

// comparisons are the pairs measured in the same run; the ratio is the
// second's median over the first's.
var comparisons = []struct{ ours, theirs, what string }{
	{"BenchmarkMountinfo/1k/hpmount-parse", "BenchmarkMountinfo/1k/moby", "mountinfo parse, 1k entries: moby/sys/mountinfo ÷ hpmount"},
	{"BenchmarkMountinfo/10k/hpmount-parse", "BenchmarkMountinfo/10k/moby", "mountinfo parse, 10k entries: moby/sys/mountinfo ÷ hpmount"},
	{"BenchmarkMountinfo/100k/hpmount-parse", "BenchmarkMountinfo/100k/moby", "mountinfo parse, 100k entries: moby/sys/mountinfo ÷ hpmount"},
	{"BenchmarkMountinfo/10k/hpmount", "BenchmarkMountinfo/10k/findmnt", "mountinfo 10k entries, read with indexes: exec of findmnt --json ÷ hpmount"},
	{"BenchmarkBind/raw", "BenchmarkBind/exec", "bind + unmount of disk.img: exec of mount(8)/umount(8) ÷ raw syscalls"},
}

// benchResult is one benchmark's runs: ns/op and any reported metric.
type benchResult map[string][]float64 // unit → values

// goBenchmarks runs the Go benchmarks and renders their section.
func goBenchmarks() (string, error) {
	results := map[string]benchResult{}
	var order []string
	var cmds []string
	var err error
	for _, p := range benchPackages {
		args := []string{"test", "-run", "^$", "-bench", p.pattern, "-benchmem", "-count", strconv.Itoa(benchCount), p.pkg}
		cmds = append(cmds, "go "+strings.Join(args, " "))
		cmd := exec.Command("go", args...)
		if cmd.Dir, err = repo.Root(); err != nil {
			return "", err
		}
		cmd.Env = append(os.Environ(), "HPMOUNT_REQUIRE_ROOT=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s: %w: %s", cmds[len(cmds)-1], err, lastLines(out, 10))
		}
		order = parseBench(out, results, order)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n## Go benchmarks (%d runs each; p99 is the slowest run)\n\n", benchCount)
	for _, c := range cmds {
		fmt.Fprintf(&b, "- `HPMOUNT_REQUIRE_ROOT=1 %s`\n", c)
	}
	fmt.Fprintf(&b, "\n| benchmark | median | p99 | other metrics (median) |\n|---|---|---|---|\n")
	for _, name := range order {
		ns := results[name]["ns/op"]
		var extra []string
		for unit, vs := range results[name] {
			if unit != "ns/op" {
				extra = append(extra, fmt.Sprintf("%s %s", num(median(vs)), unit))
			}
		}
		slices.Sort(extra)
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, dur(median(ns)), dur(slices.Max(ns)), strings.Join(extra, ", "))
	}
	fmt.Fprintf(&b, "\n| comparison, same run | ratio of medians |\n|---|---|\n")
	for _, c := range comparisons {
		ours, theirs := results[c.ours]["ns/op"], results[c.theirs]["ns/op"]
		if len(ours) == 0 || len(theirs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.2f× |\n", c.what, median(theirs)/median(ours))
	}
	return b.String(), nil
}

// parseBench reads `go test -bench` lines: name-N, iterations, then value
// unit pairs.
func parseBench(out []byte, results map[string]benchResult, order []string) []string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		if results[name] == nil {
			results[name] = benchResult{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				results[name][f[i+1]] = append(results[name][f[i+1]], v)
			}
		}
	}
	return order
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	return s[len(s)/2]
}

func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
