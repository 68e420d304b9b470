//go:build !linux

package blockdev

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/outcome"
)

// PublishedDevice is only supported on Linux.
func (n *Nodes) PublishedDevice(podUID, pvName string) (Published, error) {
	return Published{}, fmt.Errorf("published device of pod %s: %w", podUID, errors.ErrUnsupported)
}

// Ensure is only supported on Linux.
func (n *Nodes) Ensure(targetDir, name string, p Published) (outcome.Result, Device, error) {
	return outcome.Unchanged, Device{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}

// Remove is only supported on Linux.
func (n *Nodes) Remove(targetDir, name string) (outcome.Result, Device, error) {
	return outcome.Unchanged, Device{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}

// Observe is only supported on Linux.
func (n *Nodes) Observe(targetDir string) ([]Node, error) {
	return nil, fmt.Errorf("list %q: %w", targetDir, errors.ErrUnsupported)
}

func (n *Nodes) recheck(targetDir, name string) (Device, error) {
	return Device{}, fmt.Errorf("node %q: %w", name, errors.ErrUnsupported)
}
