// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"path"
	"regexp"
	"strings"
)

// Notice is the text of the notice, one line each, without comment marks.
var Notice = []string{"Copyright The hpmount Authors.", "SPDX-License-Identifier: Apache-2.0"}

// Style is how a kind of file comments a line; "" for files that carry no
// notice.
type Style string

const (
	None  Style = ""
	Slash Style = "// "
	Hash  Style = "# "
)

// StyleOf says how the file at the slash-separated path p, beginning with
// head, comments: Go files with //, Makefiles, Dockerfiles, shell scripts
// and any "#!" script with #.
func StyleOf(p string, head []byte) Style {
	base := path.Base(p)
	switch {
	case strings.HasSuffix(base, ".go"):
		return Slash
	case base == "Makefile", base == "Dockerfile", strings.HasSuffix(base, ".Dockerfile"),
		strings.HasSuffix(base, ".sh"), bytes.HasPrefix(head, []byte("#!")):
		return Hash
	}
	return None
}

// dockerDirective is a Dockerfile parser directive, which only counts
// before any comment.
var dockerDirective = regexp.MustCompile(`^#\s*(syntax|escape|check)\s*=`)

// preamble is the number of bytes of data that must stay before the
// notice: a "#!" line, or a Dockerfile's parser directives.
func preamble(data []byte) int {
	n := 0
	for first := true; n < len(data); first = false {
		end := bytes.IndexByte(data[n:], '\n')
		if end < 0 {
			end = len(data) - n - 1
		}
		line := data[n : n+end+1]
		if !(first && bytes.HasPrefix(line, []byte("#!"))) && !dockerDirective.Match(line) {
			break
		}
		n += end + 1
	}
	return n
}

func header(s Style) string {
	var b strings.Builder
	for _, l := range Notice {
		b.WriteString(string(s) + l + "\n")
	}
	return b.String()
}

// HasNotice says whether data carries the notice right after its preamble.
func HasNotice(s Style, data []byte) bool {
	return bytes.HasPrefix(data[preamble(data):], []byte(header(s)))
}

// AddNotice returns data with the notice after its preamble and a blank
// line after the notice, so that it never becomes a Go package's doc
// comment; data that has it comes back unchanged.
func AddNotice(s Style, data []byte) []byte {
	if HasNotice(s, data) {
		return data
	}
	n := preamble(data)
	out := append([]byte(nil), data[:n]...)
	if n > 0 && out[n-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, header(s)...)
	out = append(out, '\n')
	return append(out, data[n:]...)
}
