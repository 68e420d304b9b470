// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// The README's shape: longer reference belongs in docs/.
const (
	maxCellChars = 300
	maxItemLines = 10
)

// proseLines returns text's lines with fenced code blocks blanked out, so
// that what a code block shows is never read as a table, list or link.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	inCode := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
			lines[i] = ""
			continue
		}
		if inCode {
			lines[i] = ""
		}
	}
	return lines
}

var itemRE = regexp.MustCompile(`^(\s*)([-*]|\d+\.) `)

// shapeProblems names each table cell over maxCellChars and each list
// item over maxItemLines lines (a nested item counts on its own).
func shapeProblems(text string) []string {
	lines := proseLines(text)
	var out []string
	for i, l := range lines {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		for _, c := range strings.Split(l, "|") {
			if c = strings.TrimSpace(c); len(c) > maxCellChars {
				out = append(out, fmt.Sprintf("line %d: a table cell of %d characters (at most %d): %.50s…", i+1, len(c), maxCellChars, c))
			}
		}
	}
	for i := 0; i < len(lines); i++ {
		m := itemRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		end := itemEnd(lines, i, len(m[1]))
		if n := end - i; n > maxItemLines {
			out = append(out, fmt.Sprintf("line %d: a list item of %d lines (at most %d): %.50s…", i+1, n, maxItemLines, strings.TrimSpace(lines[i])))
		}
	}
	return out
}

// itemEnd returns the index after the last line of the item starting at
// lines[start] with the given indent: its continuation lines are indented
// deeper and are not items themselves.
func itemEnd(lines []string, start, indent int) int {
	end := start + 1
	for end < len(lines) {
		l := lines[end]
		if strings.TrimSpace(l) == "" || itemRE.MatchString(l) || len(l)-len(strings.TrimLeft(l, " ")) <= indent {
			break
		}
		end++
	}
	return end
}

// checkLink checks that a relative link from doc names an existing file
// and, for a Markdown file, an existing heading.
func checkLink(doc, target string) error {
	path, anchor, _ := strings.Cut(target, "#")
	file := doc
	if path != "" {
		file = filepath.Join(filepath.Dir(doc), path)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		if st, serr := os.Stat(filepath.Join(repoRoot, file)); serr == nil && st.IsDir() {
			return nil
		}
		return fmt.Errorf("link %q: %w", target, err)
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return nil
	}
	for _, l := range proseLines(string(b)) {
		if strings.HasPrefix(l, "#") && slug(strings.TrimLeft(l, "# ")) == anchor {
			return nil
		}
	}
	return fmt.Errorf("link %q: %q has no heading #%s", target, file, anchor)
}

var slugDrop = regexp.MustCompile(`[^\p{L}\p{N} _-]`)

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func slug(heading string) string {
	s := slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
	return strings.ReplaceAll(s, " ", "-")
}

// changelogHeading is a release heading of CHANGELOG.md: Unreleased, or a
// version with its date.
var changelogHeading = regexp.MustCompile(`^## (\[Unreleased\]|\[v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?\] - [0-9]{4}-[0-9]{2}-[0-9]{2})$`)

// changelogSections are Keep a Changelog's kinds of change.
var changelogSections = map[string]bool{"Added": true, "Changed": true, "Deprecated": true, "Removed": true, "Fixed": true, "Security": true}

// changelogProblems checks CHANGELOG.md's shape: Keep a Changelog's
// headings, Unreleased first, each section one of its kinds.
func changelogProblems(text string) []string {
	var out []string
	releases := 0
	for i, l := range proseLines(text) {
		switch {
		case strings.HasPrefix(l, "## "):
			if !changelogHeading.MatchString(l) {
				out = append(out, fmt.Sprintf("line %d: %q is neither [Unreleased] nor [vX.Y.Z] - YYYY-MM-DD", i+1, l))
			}
			if releases == 0 && l != "## [Unreleased]" {
				out = append(out, fmt.Sprintf("line %d: the first release heading is %q, want [Unreleased]", i+1, l))
			}
			releases++
		case strings.HasPrefix(l, "### "):
			if !changelogSections[strings.TrimPrefix(l, "### ")] {
				out = append(out, fmt.Sprintf("line %d: section %q is not one of Keep a Changelog's", i+1, l))
			}
		}
	}
	if releases == 0 {
		out = append(out, "no release heading")
	}
	return out
}
