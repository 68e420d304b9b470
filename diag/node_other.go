// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package diag

import (
	"errors"
)

func (in *inspector) statEntry(dirRel, name string) (entry, error) {
	return entry{}, errors.ErrUnsupported
}

func (in *inspector) launcherDirs() ([]string, error) { return nil, errors.ErrUnsupported }
