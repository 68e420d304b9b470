// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrDynamic is what CheckStatic wraps for a dynamically linked binary.
var ErrDynamic = errors.New("dynamically linked")

// CheckStatic refuses a binary that needs a dynamic loader or shared
// libraries: the agent's image (test/realnode AgentImage) holds the binary
// alone, with no libc, so such a binary never starts there and its pod
// never becomes Ready. A plain `go build` of hpmount is dynamic wherever
// cgo is on (the net and os/user packages link libc); `make build` sets
// CGO_ENABLED=0.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read %q as an ELF executable: %w", path, err)
	}
	defer f.Close()
	var why []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, err := io.ReadAll(p.Open())
			if err != nil {
				return fmt.Errorf("read the interpreter of %q: %w", path, err)
			}
			why = append(why, "interpreter "+strings.TrimRight(string(interp), "\x00"))
		}
	}
	// A static binary has no dynamic section: no libraries, no error.
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		why = append(why, "needs "+strings.Join(libs, ", "))
	}
	if len(why) > 0 {
		return fmt.Errorf("%q is %w (%s): the agent's image has no libc, so it would never start; "+
			"build it static with make build, or CGO_ENABLED=0 go build ./cmd/hpmount",
			path, ErrDynamic, strings.Join(why, "; "))
	}
	return nil
}
