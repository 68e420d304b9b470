// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package blockdev

import (
	"errors"
	"fmt"
)

func blockDeviceSize(sysRoot string, major, minor uint32) (int64, error) {
	return 0, fmt.Errorf("block device size %d:%d: %w", major, minor, errors.ErrUnsupported)
}
