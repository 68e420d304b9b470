// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package mount

import (
	"errors"
	"fmt"
	"os"
)

func statfsPath(path string) (FilesystemUsage, error) {
	return FilesystemUsage{}, fmt.Errorf("statfs %q: %w", path, errors.ErrUnsupported)
}

func statfsFile(f *os.File) (FilesystemUsage, error) {
	return FilesystemUsage{}, fmt.Errorf("statfs %q: %w", f.Name(), errors.ErrUnsupported)
}
