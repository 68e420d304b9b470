// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command testsummary reads `go test -json` and prints failures, skips and a
// closing line "N passed, N failed, N skipped". It exits non-zero when any
// test failed, any package failed to build, or any test was skipped: every
// test of this project, root tests included, must run in CI.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	output := map[string][]string{} // package/test -> output lines
	var passed, failed, skipped int
	var failures, skips []string
	var pkgFailed []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // build errors arrive as plain text
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			output[key] = append(output[key], e.Output)
			if e.Test == "" && strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL\t") {
				fmt.Print(e.Output)
			}
		case "pass":
			if e.Test != "" {
				passed++
			}
		case "skip":
			if e.Test != "" {
				skipped++
				skips = append(skips, key)
			}
		case "fail":
			if e.Test != "" {
				failed++
				failures = append(failures, key)
			} else {
				pkgFailed = append(pkgFailed, e.Package)
			}
		}
	}
	sort.Strings(failures)
	for _, k := range failures {
		fmt.Printf("\n--- FAIL: %s\n%s", k, strings.Join(output[k], ""))
	}
	for _, p := range pkgFailed {
		if out := output[p+" "]; len(out) > 0 && !hasTestFailure(failures, p) {
			fmt.Printf("\n--- FAIL: package %s\n%s", p, strings.Join(out, ""))
		}
	}
	for _, k := range skips {
		fmt.Printf("\n--- SKIP (not allowed): %s\n%s", k, strings.Join(output[k], ""))
	}
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || skipped > 0 || len(pkgFailed) > 0 {
		os.Exit(1)
	}
}

func hasTestFailure(failures []string, pkg string) bool {
	for _, f := range failures {
		if strings.HasPrefix(f, pkg+" ") {
			return true
		}
	}
	return false
}
