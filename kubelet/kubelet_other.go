// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/hpmount/hpmount/isolation"
)

// ResolveRoot is only supported on Linux.
func ResolveRoot(_ *isolation.MountNamespace, configured string) (Root, error) {
	return Root{}, fmt.Errorf("resolve kubelet root %q: %w", configured, errors.ErrUnsupported)
}

// Open is only supported on Linux.
func (r Root) Open() (*os.File, error) {
	return nil, fmt.Errorf("open kubelet root %q: %w", r.Path, errors.ErrUnsupported)
}

// FindPublished is only supported on Linux.
func FindPublished(r Root, podUID, pvName string) (string, error) {
	return "", fmt.Errorf("find volume %q of pod %q: %w", pvName, podUID, errors.ErrUnsupported)
}

// OpenPublishedDevice is only supported on Linux.
func OpenPublishedDevice(r Root, podUID, pvName string) (*os.File, error) {
	return nil, fmt.Errorf("find device %q of pod %q: %w", pvName, podUID, errors.ErrUnsupported)
}

// PublishedDevicePath is only supported on Linux.
func PublishedDevicePath(Root, string, string) string { return "" }

// LauncherDirs is only supported on Linux.
func LauncherDirs(r Root) ([]LauncherDir, error) {
	return nil, fmt.Errorf("list launchers under %q: %w", r.Path, errors.ErrUnsupported)
}

// ReadTargets is only supported on Linux.
func ReadTargets(dir *os.File) ([]fs.DirEntry, bool, error) {
	return nil, false, fmt.Errorf("list %q: %w", dir.Name(), errors.ErrUnsupported)
}

// ReadFileTargets is only supported on Linux.
func ReadFileTargets(dir *os.File) ([]fs.DirEntry, error) {
	return nil, fmt.Errorf("list %q: %w", dir.Name(), errors.ErrUnsupported)
}

// ReadDirTargets is only supported on Linux.
func ReadDirTargets(dir *os.File) ([]fs.DirEntry, error) {
	return nil, fmt.Errorf("list %q: %w", dir.Name(), errors.ErrUnsupported)
}

// TargetNames is only supported on Linux.
func TargetNames(r Root, launcherUID string) (map[string]bool, error) {
	return nil, fmt.Errorf("list targets of launcher %q: %w", launcherUID, errors.ErrUnsupported)
}
