// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package mount

import (
	"errors"
	"fmt"
	"os"

	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

func (a *Attacher) findPublished(podUID, pvName string) (string, error) {
	return "", fmt.Errorf("find volume %q of pod %q: %w", pvName, podUID, errors.ErrUnsupported)
}

func (a *Attacher) attach(t *mountinfo.Table, sourceDir, targetDir, name string) (outcome.Result, error) {
	return "", fmt.Errorf("attach %q to %q: %w", sourceDir, targetDir, errors.ErrUnsupported)
}

func (a *Attacher) detach(t *mountinfo.Table, targetDir, name string) (outcome.Result, error) {
	return "", fmt.Errorf("detach %q from %q: %w", name, targetDir, errors.ErrUnsupported)
}

func (a *Attacher) observe(t *mountinfo.Table, targetDir string, _ Lister) ([]Observed, error) {
	return nil, fmt.Errorf("observe %q: %w", targetDir, errors.ErrUnsupported)
}

func (a *Attacher) checkImage(t *mountinfo.Table, sourceDir string) (Image, error) {
	return Image{}, fmt.Errorf("check %q: %w", sourceDir, errors.ErrUnsupported)
}

func (a *Attacher) checkTarget(t *mountinfo.Table, targetDir, file string, dir bool) error {
	return fmt.Errorf("check %q in %q: %w", file, targetDir, errors.ErrUnsupported)
}

func (a *Attacher) attachDir(t *mountinfo.Table, sourceDir, targetDir, name string) (outcome.Result, error) {
	return "", fmt.Errorf("attach directory %q to %q: %w", sourceDir, targetDir, errors.ErrUnsupported)
}

func (a *Attacher) detachDir(t *mountinfo.Table, targetDir, name string) (outcome.Result, error) {
	return "", fmt.Errorf("detach directory %q from %q: %w", name, targetDir, errors.ErrUnsupported)
}

func (a *Attacher) observeDirs(t *mountinfo.Table, targetDir string, _ Lister) ([]Observed, error) {
	return nil, fmt.Errorf("observe directories in %q: %w", targetDir, errors.ErrUnsupported)
}

func (a *Attacher) createDiskImage(sourceDir string, capacity int64, overhead float64) (int64, bool, error) {
	return 0, false, fmt.Errorf("create disk image in %q: %w", sourceDir, errors.ErrUnsupported)
}

func deadSource(error) bool { return false }

func (a *Attacher) openLauncherDir(t *mountinfo.Table, targetDir string) (*os.File, error) {
	return nil, fmt.Errorf("open %q: %w", targetDir, errors.ErrUnsupported)
}

func uncover(_ steps, t *mountinfo.Table, dir *os.File, name string) (int, error) {
	return 0, fmt.Errorf("uncover %q in %q: %w", name, dir.Name(), errors.ErrUnsupported)
}

func (a *Attacher) openBound(t *mountinfo.Table, targetDir string, _ []string) (map[string]*os.File, error) {
	return nil, fmt.Errorf("open the targets of %q: %w", targetDir, errors.ErrUnsupported)
}

func answers(f *os.File) error { return fmt.Errorf("statx %q: %w", f.Name(), errors.ErrUnsupported) }

type openedDir struct{}

func (a *Attacher) withLauncherDir(_ *mountinfo.Table, _ string, fn func(*Attacher) error) error {
	return fn(a)
}
