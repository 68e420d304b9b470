// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one measurement of the report.
type row struct {
	what string
	unit string
	// runs are the values of repeated runs; with quantiles set they are
	// [p50, p99] of one distribution instead.
	runs      []float64
	quantiles bool
	target    float64
	// targetOn is the statistic the target applies to: "median" (the
	// default), "p50" or "p99".
	targetOn string
	note     string
}

// median and p99 of the runs; p99 of a handful of runs is their maximum.
func (r row) median() float64 {
	if r.quantiles {
		return r.runs[0]
	}
	s := slices.Sorted(slices.Values(r.runs))
	return s[len(s)/2]
}

func (r row) p99() float64 {
	if r.quantiles {
		return r.runs[1]
	}
	s := slices.Sorted(slices.Values(r.runs))
	return s[min(len(s)-1, int(0.99*float64(len(s))))]
}

func (r row) met() string {
	if r.target == 0 {
		return ""
	}
	v := r.median()
	if r.targetOn == "p99" {
		v = r.p99()
	}
	if v <= r.target {
		return "met"
	}
	return "**missed**"
}

func (r row) targetText() string {
	if r.target == 0 {
		return "—"
	}
	on := r.targetOn
	if on == "" {
		on = "median"
	}
	return fmt.Sprintf("%s ≤ %s %s", on, num(r.target), r.unit)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// report collects the rows and writes BENCHMARKS.md.
type report struct {
	opts    options
	started time.Time
	setup   string
	rows    []row
	// prose explains rows in paragraphs below the table, once per key, in
	// the order first given; it holds no figure of its own.
	prose []string
	said  map[string]bool
}

func newReport(o options) *report { return &report{opts: o, started: time.Now()} }

func (r *report) add(x row) {
	r.rows = append(r.rows, x)
	fmt.Printf("   %s: median %s %s, p99 %s %s %s\n", x.what, num(x.median()), x.unit, num(x.p99()), x.unit, x.met())
}

// explain adds a paragraph below the table, once per key.
func (r *report) explain(key, text string) {
	if r.said == nil {
		r.said = map[string]bool{}
	}
	if !r.said[key] {
		r.said[key] = true
		r.prose = append(r.prose, text)
	}
}

func (r *report) write(path string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# hpmount benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `make bench-node` (the scale harness, `go run ./test/scale`, and the Go benchmarks it runs). "+
		"Do not edit by hand: run it again.\n\n")
	fmt.Fprintf(&b, "- machine: %s\n- date: %s\n- command: `%s`\n- node: %s\n\n",
		machine(), r.started.UTC().Format("2006-01-02 15:04 MST"), "go run ./test/scale "+strings.Join(os.Args[1:], " "), r.setup)
	fmt.Fprintf(&b, "## Node scale (real kube-apiserver and etcd, simulated node, the hpmount binary)\n\n")
	fmt.Fprintf(&b, "| measured | median | p99 | runs | target | | note |\n|---|---|---|---|---|---|---|\n")
	for _, x := range r.rows {
		n := strconv.Itoa(len(x.runs))
		if x.quantiles {
			n = "1 (p50, p99 of its samples)"
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s %s | %s | %s | %s | %s |\n", x.what, num(x.median()), x.unit, num(x.p99()), x.unit, n, x.targetText(), x.met(), x.note)
	}
	for _, p := range r.prose {
		fmt.Fprintf(&b, "\n%s\n", p)
	}
	if r.opts.goBench {
		benches, err := goBenchmarks()
		if err != nil {
			fmt.Fprintf(&b, "\nGo benchmarks could not run: %v\n", err)
		} else {
			b.WriteString(benches)
		}
	}
	fmt.Print("\n" + b.String())
	if path == "" {
		return nil
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	kernel, _ := runCmd("uname", "-r")
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1]
		if kb, err := strconv.ParseInt(mem, 10, 64); err == nil {
			mem = fmt.Sprintf(", %d GiB", (kb+(1<<19))>>20)
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, Linux %s, %s", runtime.NumCPU(), cpu, mem, kernel, runtime.Version())
}
