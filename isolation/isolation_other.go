// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package isolation

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// OpenRoot is only supported on Linux.
func OpenRoot(path string) (*os.File, error) {
	return nil, fmt.Errorf("open root %q: %w", path, errors.ErrUnsupported)
}

// OpenBeneath is only supported on Linux.
func OpenBeneath(root *os.File, rel string, how How) (*os.File, error) {
	return nil, fmt.Errorf("open %q: %w", rel, errors.ErrUnsupported)
}

// FollowLinkBeneath is only supported on Linux.
func FollowLinkBeneath(root *os.File, rootPaths []string, rel string, how How) (*os.File, error) {
	return nil, fmt.Errorf("follow %q: %w", rel, errors.ErrUnsupported)
}

// ReadLinkBeneath is only supported on Linux.
func ReadLinkBeneath(root *os.File, rootPaths []string, rel string) (string, error) {
	return "", fmt.Errorf("read link %q: %w", rel, errors.ErrUnsupported)
}

func checkOpenat2() error { return fmt.Errorf("openat2: %w", errors.ErrUnsupported) }

// MountID is only supported on Linux.
func MountID(f *os.File) (uint64, error) { return 0, errors.ErrUnsupported }

// MountNamespace is only supported on Linux.
type MountNamespace struct{}

// OpenMountNamespace is only supported on Linux.
func OpenMountNamespace(nsPath string) (*MountNamespace, error) {
	return nil, fmt.Errorf("mount namespace %q: %w", nsPath, errors.ErrUnsupported)
}

// do is only supported on Linux.
func (m *MountNamespace) do(*Live, func() error) error { return errors.ErrUnsupported }

// SetTimeout is only supported on Linux.
func (m *MountNamespace) SetTimeout(time.Duration) {}

// Health is only supported on Linux.
func (m *MountNamespace) Health(time.Time) (uint64, time.Duration) { return 0, 0 }

// Held is only supported on Linux.
func (m *MountNamespace) Held() int { return 0 }

// StuckCalls is only supported on Linux.
func (m *MountNamespace) StuckCalls() ([]StuckCall, error) { return nil, errors.ErrUnsupported }

// Path is only supported on Linux.
func (m *MountNamespace) Path() string { return "" }

// Close is only supported on Linux.
func (m *MountNamespace) Close() {}

// OpenInRoot is only supported on Linux.
func OpenInRoot(root *os.File, path string) (*os.File, error) {
	return nil, fmt.Errorf("open %q: %w", path, errors.ErrUnsupported)
}

// ReadFileBeneath is only supported on Linux.
func ReadFileBeneath(dir, name string, limit int64) ([]byte, error) {
	return nil, fmt.Errorf("read %q: %w", name, errors.ErrUnsupported)
}
