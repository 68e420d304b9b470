// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package blockdev

import (
	"errors"
	"fmt"
	"os"

	"github.com/hpmount/hpmount/outcome"
)

// PublishedDevice is only supported on Linux.
func (n *Nodes) PublishedDevice(podUID, pvName string) (Published, error) {
	return Published{}, fmt.Errorf("published device of pod %s: %w", podUID, errors.ErrUnsupported)
}

// Ensure is only supported on Linux.
func (n *Nodes) Ensure(dir *os.File, name string, p Published) (outcome.Result, Device, error) {
	return outcome.Unchanged, Device{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}

// Remove is only supported on Linux.
func (n *Nodes) Remove(dir *os.File, name string) (outcome.Result, Device, error) {
	return outcome.Unchanged, Device{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}

// Observe is only supported on Linux.
func (n *Nodes) Observe(dir *os.File) ([]Node, error) {
	return nil, fmt.Errorf("list %q: %w", dir.Name(), errors.ErrUnsupported)
}

func (n *Nodes) recheck(dir *os.File, name string) (Device, error) {
	return Device{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}

func (n *Nodes) look(dir *os.File, name string) (Node, error) {
	return Node{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}

// Number packs d into one number; only Linux's dev_t is compared.
func (d Device) Number() uint64 { return uint64(d.Major)<<32 | uint64(d.Minor) }
