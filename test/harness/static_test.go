// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// linksLibc uses the two packages that make hpmount dynamic under a plain
// go build with cgo on: the resolver of net and the lookups of os/user.
const linksLibc = `package main

import (
	"fmt"
	"net"
	"os/user"
)

func main() {
	_, err := net.LookupHost("localhost")
	_, uerr := user.Current()
	fmt.Println(err, uerr)
}
`

// TestCheckStatic: the same program built with cgo (dynamic, as a plain go
// build on a machine with a C compiler makes it) is refused with ErrDynamic
// and a message naming its loader; built with CGO_ENABLED=0 (make build)
// it passes; a file that is not ELF is an error of its own.
func TestCheckStatic(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("a C compiler is needed to build the dynamic binary (make deps installs gcc): %v", err)
	}
	src := t.TempDir()
	for name, data := range map[string]string{"go.mod": "module linkslibc\n\ngo 1.22\n", "main.go": linksLibc} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, cgo string
		dynamic   bool
	}{
		{"cgo on, as a plain go build", "1", true},
		{"CGO_ENABLED=0, as make build", "0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "prog")
			cmd := exec.Command("go", "build", "-o", bin, ".")
			cmd.Dir = src
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+tt.cgo)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			err := CheckStatic(bin)
			if got := errors.Is(err, ErrDynamic); got != tt.dynamic {
				t.Fatalf("CheckStatic = %v, want dynamic %v", err, tt.dynamic)
			}
			if tt.dynamic {
				t.Logf("refused: %v", err)
			}
		})
	}
	t.Run("not ELF", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := CheckStatic(p); err == nil || errors.Is(err, ErrDynamic) {
			t.Fatalf("CheckStatic of a script = %v, want an error that is not ErrDynamic", err)
		}
	})
}
