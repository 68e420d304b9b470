// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddNotice(t *testing.T) {
	for _, tc := range []struct {
		name, path, in, want string
	}{
		{"go", "a/b.go", "// Package b does.\npackage b\n",
			"// Copyright The hpmount Authors.\n// SPDX-License-Identifier: Apache-2.0\n\n// Package b does.\npackage b\n"},
		{"go build tag", "a/b_linux.go", "//go:build linux\n\npackage b\n",
			"// Copyright The hpmount Authors.\n// SPDX-License-Identifier: Apache-2.0\n\n//go:build linux\n\npackage b\n"},
		{"script", "x/run", "#!/usr/bin/env bash\n# Runs.\nset -e\n",
			"#!/usr/bin/env bash\n# Copyright The hpmount Authors.\n# SPDX-License-Identifier: Apache-2.0\n\n# Runs.\nset -e\n"},
		{"shell", "x/lib.sh", "f() { :; }\n",
			"# Copyright The hpmount Authors.\n# SPDX-License-Identifier: Apache-2.0\n\nf() { :; }\n"},
		{"dockerfile directive", "Dockerfile", "# syntax=docker/dockerfile:1\n#\n# Image.\nFROM scratch\n",
			"# syntax=docker/dockerfile:1\n# Copyright The hpmount Authors.\n# SPDX-License-Identifier: Apache-2.0\n\n#\n# Image.\nFROM scratch\n"},
		{"makefile", "Makefile", "all:\n",
			"# Copyright The hpmount Authors.\n# SPDX-License-Identifier: Apache-2.0\n\nall:\n"},
		{"has it", "a.go", "// Copyright The hpmount Authors.\n// SPDX-License-Identifier: Apache-2.0\n\npackage a\n",
			"// Copyright The hpmount Authors.\n// SPDX-License-Identifier: Apache-2.0\n\npackage a\n"},
		{"shebang only, no newline", "x/y.sh", "#!/bin/sh",
			"#!/bin/sh\n# Copyright The hpmount Authors.\n# SPDX-License-Identifier: Apache-2.0\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := StyleOf(tc.path, []byte(tc.in))
			got := string(AddNotice(s, []byte(tc.in)))
			if got != tc.want {
				t.Fatalf("AddNotice:\n%q\nwant\n%q", got, tc.want)
			}
			if !HasNotice(s, []byte(got)) || string(AddNotice(s, []byte(got))) != got {
				t.Errorf("the fixed file is not seen as fixed")
			}
		})
	}
}

// TestGoDocUnchanged: the notice is not the package's doc comment and the
// build constraint still holds.
func TestGoDocUnchanged(t *testing.T) {
	src := AddNotice(Slash, []byte("//go:build linux\n\n// Package b does.\npackage b\n"))
	f, err := parser.ParseFile(token.NewFileSet(), "b.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if doc := f.Doc.Text(); doc != "Package b does.\n" {
		t.Errorf("package doc %q", doc)
	}
	if !strings.Contains(string(src), "\n\n//go:build linux\n\n") {
		t.Errorf("build constraint moved:\n%s", src)
	}
}

func TestStyleOf(t *testing.T) {
	for path, want := range map[string]Style{
		"a/b.go": Slash, "Makefile": Hash, "Dockerfile": Hash, "deploy/agent.Dockerfile": Hash,
		"x.sh": Hash, "README.md": None, "deploy/daemonset.yaml": None, "LICENSE": None,
	} {
		if got := StyleOf(path, nil); got != want {
			t.Errorf("StyleOf(%q) = %q, want %q", path, got, want)
		}
	}
	if StyleOf(".ci/run", []byte("#!/usr/bin/env bash\n")) != Hash {
		t.Errorf("a #! script without a suffix has no style")
	}
}

// TestRepositoryNotices fails while a file of the repository lacks the
// notice; `go run ./test/license -fix` adds it.
func TestRepositoryNotices(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := sourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := check(files, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range missing {
		if rel, err := filepath.Rel(root, m); err == nil {
			missing[i] = rel
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d files lack the Apache-2.0 notice (go run ./test/license -fix adds it):\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
}
