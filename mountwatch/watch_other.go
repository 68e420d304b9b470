// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package mountwatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// Watcher reports mount changes; only Linux has them.
type Watcher struct{}

// Open fails: mount notifications are Linux's.
func Open(isolation.Host, kubelet.Root) (*Watcher, error) {
	return nil, fmt.Errorf("mount notifications: %w", errors.ErrUnsupported)
}

// Tracked is 0.
func (w *Watcher) Tracked() int { return 0 }

// Next fails.
func (w *Watcher) Next(context.Context) (Change, error) {
	return Change{}, fmt.Errorf("mount notifications: %w", errors.ErrUnsupported)
}

// Close does nothing.
func (w *Watcher) Close() error { return nil }
