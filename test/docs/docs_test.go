// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeShape fails on a README table cell or list item too long to
// read as a guide: such reference belongs in docs/.
func TestReadmeShape(t *testing.T) {
	text := read(t, "README.md")
	for _, p := range shapeProblems(text) {
		t.Errorf("README.md: %s", p)
	}
}

func TestShapeProblems(t *testing.T) {
	long := strings.Repeat("x", maxCellChars+1)
	tests := []struct {
		name, text string
		want       int
	}{
		{"short table", "| a | b |\n|---|---|\n| c | d |\n", 0},
		{"long cell", "| a |\n|---|\n| " + long + " |\n", 1},
		{"short item", "- one\n  two\n- three\n", 0},
		{"long item", "- one\n" + strings.Repeat("  more\n", maxItemLines) + "\n", 1},
		{"nested items count apart", "- top\n" + strings.Repeat("  - sub\n", maxItemLines+2), 0},
		{"code block is not an item", "```\n- x\n" + strings.Repeat("  y\n", 20) + "```\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shapeProblems(tc.text); len(got) != tc.want {
				t.Errorf("%d problems %q, want %d", len(got), got, tc.want)
			}
		})
	}
}

// TestChangelog holds CHANGELOG.md to Keep a Changelog's shape, which
// release notes are cut from.
func TestChangelog(t *testing.T) {
	for _, p := range changelogProblems(read(t, "CHANGELOG.md")) {
		t.Errorf("CHANGELOG.md: %s", p)
	}
}

func TestChangelogProblems(t *testing.T) {
	tests := []struct {
		name, text string
		want       int
	}{
		{"unreleased and a release", "# C\n## [Unreleased]\n### Added\n- x\n## [v1.2.3] - 2026-12-01\n### Fixed\n- y\n", 0},
		{"a release first", "## [v1.2.3] - 2026-12-01\n", 1},
		{"release without date", "## [Unreleased]\n## [v1.2.3]\n", 1},
		{"unknown section", "## [Unreleased]\n### Misc\n", 1},
		{"no release", "# C\n", 1},
		{"heading in code", "## [Unreleased]\n```\n## nope\n```\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := changelogProblems(tc.text); len(got) != tc.want {
				t.Errorf("%d problems %q, want %d", len(got), got, tc.want)
			}
		})
	}
}

// TestRelativeLinks fails on a link from one of the project's documents
// to a file or heading that does not exist.
func TestRelativeLinks(t *testing.T) {
	docs := []string{"README.md", "ARCHITECTURE.md", "HACKING.md", "SECURITY.md", "CHANGELOG.md", "test/README.md", "deploy/README.md"}
	more, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(repoRoot, m)
		docs = append(docs, rel)
	}
	for _, doc := range docs {
		if _, err := os.Stat(filepath.Join(repoRoot, doc)); os.IsNotExist(err) {
			continue
		}
		for _, target := range links(read(t, doc)) {
			if err := checkLink(doc, target); err != nil {
				t.Errorf("%s: %v", doc, err)
			}
		}
	}
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links returns the relative link targets of a Markdown text, outside
// code blocks.
func links(text string) []string {
	var out []string
	for _, l := range proseLines(text) {
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// TestReadmeContents fails on a README section (## or ###) that its
// Contents list does not link; TestRelativeLinks checks the links land.
func TestReadmeContents(t *testing.T) {
	text := read(t, "README.md")
	start := strings.Index(text, "## Contents\n")
	if start < 0 {
		t.Fatal("README.md has no ## Contents")
	}
	contents, _, _ := strings.Cut(text[start+len("## Contents\n"):], "\n## ")
	for _, l := range proseLines(text) {
		heading, ok := strings.CutPrefix(l, "## ")
		if !ok {
			heading, ok = strings.CutPrefix(l, "### ")
		}
		if ok && heading != "Contents" && !strings.Contains(contents, "](#"+slug(heading)+")") {
			t.Errorf("README.md: Contents lacks %q", heading)
		}
	}
}
