// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestVerdictsDocumented holds the verdict table of docs/diag.md, the one
// place that explains them, the README's verdict sentence and
// ARCHITECTURE.md's vocabulary to Verdicts: each names every verdict diag
// can give, in the order of precedence, and nothing else.
func TestVerdictsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../docs/diag.md")
	if err != nil {
		t.Fatal(err)
	}
	front, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	arch, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	// docs/diag.md: the rows of the table under "| verdict | meaning |".
	table := regexp.MustCompile("(?s)\\| verdict \\| meaning \\| what to do \\|\n\\|[-|]+\\|\n(.*?)\n\n").FindStringSubmatch(string(readme))
	if table == nil {
		t.Fatal("docs/diag.md has no verdict table")
	}
	fromReadme := matches(regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|"), table[1])
	// The README and ARCHITECTURE.md name them in one sentence each.
	quoted := regexp.MustCompile("`([a-z-]+)`")
	sentence := func(text, start, end string) []string {
		i := strings.Index(text, start)
		if i < 0 {
			t.Fatalf("no %q", start)
		}
		j := strings.Index(text[i:], end)
		if j < 0 {
			t.Fatalf("no %q after %q", end, start)
		}
		return matches(quoted, text[i+len(start):i+j])
	}
	fromFront := sentence(string(front), "the first verdict that applies, in this order:", ".\n")
	fromArch := sentence(string(arch), "- `diag.Verdicts` (", ")")
	want := make([]string, len(Verdicts))
	for i, v := range Verdicts {
		want[i] = string(v)
	}
	for where, got := range map[string][]string{"docs/diag.md": fromReadme,
		"README.md": fromFront, "ARCHITECTURE.md": fromArch} {
		if !slices.Equal(got, want) {
			t.Errorf("%s names the verdicts %q, want %q (diag.Verdicts, in that order)", where, got, want)
		}
	}
}

func matches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}
