// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestModulePath(t *testing.T) {
	for _, tt := range []struct{ gomod, want string }{
		{"module github.com/hpmount/hpmount\n\ngo 1.26\n", Module},
		{"// a comment\nmodule \"github.com/hpmount/hpmount\"\n", Module},
		{"module github.com/hpmount/hpmount/test/peer/kubevirt\n", "github.com/hpmount/hpmount/test/peer/kubevirt"},
		{"modules x\n", ""},
		{"go 1.26\n", ""},
	} {
		if got := modulePath([]byte(tt.gomod)); got != tt.want {
			t.Errorf("modulePath(%q) = %q, want %q", tt.gomod, got, tt.want)
		}
	}
}

// TestRootFrom: a nested module's go.mod (as test/peer/kubevirt's) is
// passed over, and a tree without the checkout's go.mod is an error.
func TestRootFrom(t *testing.T) {
	top := t.TempDir()
	nested := filepath.Join(top, "test", "peer", "kubevirt")
	if err := os.MkdirAll(filepath.Join(nested, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(dir, mod string) {
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+mod+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(nested, Module+"/test/peer/kubevirt")
	if got, err := rootFrom(filepath.Join(nested, "sub")); err == nil {
		t.Fatalf("rootFrom without the checkout's go.mod = %q, want an error", got)
	}
	write(top, Module)
	for _, from := range []string{top, filepath.Join(top, "test"), filepath.Join(nested, "sub")} {
		if got, err := rootFrom(from); err != nil || got != top {
			t.Errorf("rootFrom(%q) = %q, %v; want %q", from, got, err, top)
		}
	}
}

// TestRoot: go test runs this in test/repo, two folders below the top.
func TestRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Fatalf("Root() = %q, want %q", root, want)
	}
}
