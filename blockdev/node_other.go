//go:build !linux

package blockdev

import (
	"fmt"

	"github.com/hpmount/hpmount/isolation"
)

// PublishedDevice is only supported on Linux.
func (n *Nodes) PublishedDevice(podUID, pvName string) (Published, error) {
	return Published{}, fmt.Errorf("published device of pod %s: %w", podUID, isolation.ErrUnsupported)
}

// Ensure is only supported on Linux.
func (n *Nodes) Ensure(targetDir, name string, p Published) (Result, Device, error) {
	return Unchanged, Device{}, fmt.Errorf("node %q: %w", name, isolation.ErrUnsupported)
}

// Remove is only supported on Linux.
func (n *Nodes) Remove(targetDir, name string) (Result, Device, error) {
	return Unchanged, Device{}, fmt.Errorf("node %q: %w", name, isolation.ErrUnsupported)
}

// Observe is only supported on Linux.
func (n *Nodes) Observe(targetDir string) ([]Node, error) {
	return nil, fmt.Errorf("list %q: %w", targetDir, isolation.ErrUnsupported)
}
