// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package grow

import (
	"errors"
	"fmt"
	"os"

	"github.com/hpmount/hpmount/mountinfo"
)

func (g *Grower) grow(t *mountinfo.Table, targetDir, name string, opts Options) (Result, error) {
	return Result{}, fmt.Errorf("grow %q in %q: %w", name+".img", targetDir, errors.ErrUnsupported)
}

// GrowXFSData is only supported on Linux.
func (KernelIoctls) GrowXFSData(f *os.File, _ uint64, _ uint32) error {
	return fmt.Errorf("grow xfs holding %q: %w", f.Name(), errors.ErrUnsupported)
}

// ResizeExt4 is only supported on Linux.
func (KernelIoctls) ResizeExt4(f *os.File, _ uint64) error {
	return fmt.Errorf("resize ext4 holding %q: %w", f.Name(), errors.ErrUnsupported)
}

func (g *Grower) sweep(*mountinfo.Table) (int, error) { return 0, errors.ErrUnsupported }
