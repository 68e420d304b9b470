// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package blockdev

import (
	"errors"
	"fmt"
)

func unsupported(what string) error {
	return fmt.Errorf("%s: device cgroups: %w", what, errors.ErrUnsupported)
}

// Allow is not supported on this operating system.
func (v *V1) Allow(c Container, dev Device) error { return unsupported("allow " + dev.String()) }

// Deny is not supported on this operating system.
func (v *V1) Deny(podUID string, dev Device) error { return unsupported("deny " + dev.String()) }

// Allowed is not supported on this operating system.
func (v *V1) Allowed(c Container, dev Device) (bool, error) {
	return false, unsupported("check " + dev.String())
}

// Allow is not supported on this operating system.
func (v *V2) Allow(c Container, dev Device) error { return unsupported("allow " + dev.String()) }

// Deny is not supported on this operating system.
func (v *V2) Deny(podUID string, dev Device) error { return unsupported("deny " + dev.String()) }

// Allowed is not supported on this operating system.
func (v *V2) Allowed(c Container, dev Device) (bool, error) {
	return false, unsupported("check " + dev.String())
}

// AttachedDevicePrograms is not supported on this operating system.
func AttachedDevicePrograms(dir string) ([]DeviceProgram, error) {
	return nil, unsupported(fmt.Sprintf("list device programs of %q", dir))
}

// Watch is not supported on this operating system.
func (v *V1) Watch(c Container) (RuleWatch, error) { return nil, unsupported("watch the rules") }

// Watch is not supported on this operating system.
func (v *V2) Watch(c Container) (RuleWatch, error) { return nil, unsupported("watch the rules") }
