package diag

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestVerdictsDocumented holds doc.go's verdict list and the README's
// verdict table to Verdicts: each names every verdict diag can give, in
// the order of precedence, and nothing else.
func TestVerdictsDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// doc.go: "//   - stuck: ..." for each volume verdict, then the
	// sentence that gives orphans theirs.
	fromDoc := matches(regexp.MustCompile(`(?m)^//   - ([a-z-]+): `), string(doc))
	fromDoc = append(fromDoc, matches(regexp.MustCompile(`Orphans get the verdict ([a-z-]+)`), string(doc))...)
	// README: the rows of the table under "| verdict | meaning |".
	table := regexp.MustCompile("(?s)\\| verdict \\| meaning \\| what to do \\|\n\\|[-|]+\\|\n(.*?)\n\n").FindStringSubmatch(string(readme))
	if table == nil {
		t.Fatal("README.md has no verdict table")
	}
	fromReadme := matches(regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|"), table[1])
	want := make([]string, len(Verdicts))
	for i, v := range Verdicts {
		want[i] = string(v)
	}
	for where, got := range map[string][]string{"doc.go": fromDoc, "README.md": fromReadme} {
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
