// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package mountinfo

import (
	"errors"
	"fmt"
)

func checkStatmount() error {
	return fmt.Errorf("%w: %w", ErrNoStatmount, errors.ErrUnsupported)
}

func readBeneath(dir string, _ []string) (*Table, error) {
	return nil, fmt.Errorf("read mounts beneath %q: %w: %w", dir, ErrNoStatmount, errors.ErrUnsupported)
}

func statOne(id uint64) (Info, error) {
	return Info{}, fmt.Errorf("statmount of mount %d: %w: %w", id, ErrNoStatmount, errors.ErrUnsupported)
}

func statFd(fd int) (Info, error) {
	return Info{}, fmt.Errorf("mount of fd %d: %w: %w", fd, ErrNoStatmount, errors.ErrUnsupported)
}
