// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package propagation

import (
	"errors"
	"fmt"
	"os"
)

func reached(l Launcher, name string, want Ident) (Sight, []Bound, error) {
	return NoView, nil, fmt.Errorf("look into launcher for %q: %w", name, errors.ErrUnsupported)
}

func identOf(f *os.File) (Ident, error) {
	return Ident{}, fmt.Errorf("stat %q: %w", f.Name(), errors.ErrUnsupported)
}

func (i Ident) String() string { return fmt.Sprintf("device %d inode %d", i.Dev, i.Ino) }

func (v LauncherView) check(kubeletRoot, hotplugDir, launcher, target string) (Look, error) {
	return Look{}, fmt.Errorf("look into launcher %q: %w", launcher, errors.ErrUnsupported)
}

func (v LauncherView) held(launcher, name string, cur Current) (Hold, string, error) {
	return NoQEMU, "", fmt.Errorf("what QEMU holds: %w", errors.ErrUnsupported)
}

func targetIdent(kubeletRoot, hotplugDir, target string) (Ident, error) {
	return Ident{}, fmt.Errorf("stat target %q in %q: %w", target, hotplugDir, errors.ErrUnsupported)
}
