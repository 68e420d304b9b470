// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package qemu

import (
	"context"
	"errors"
	"fmt"
)

// Start needs Linux: namespaces, cgroups and setpriv.
func Start(ctx context.Context, o Options) (*QEMU, error) {
	return nil, fmt.Errorf("start qemu: %w", errors.ErrUnsupported)
}

// Kill does nothing where Start cannot run.
func (q *QEMU) Kill() {}

// Stderr is empty where Start cannot run.
func (q *QEMU) Stderr() string { return "" }
