// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package csiplugin

import (
	"errors"
	"fmt"
)

func unsupported(what string) error {
	return fmt.Errorf("%s: loop devices and mounts need Linux: %w", what, errors.ErrUnsupported)
}

func stage(*volume) error                         { return unsupported("stage") }
func publish(volume, string, bool) error          { return unsupported("publish") }
func unpublish(string) error                      { return unsupported("unpublish") }
func unmountAll(string) error                     { return unsupported("unmount") }
func detachLoops(string) error                    { return unsupported("detach") }
func expand(volume, string, int64) (int64, error) { return 0, unsupported("expand") }

// GrowBackingFile needs Linux's loop driver.
func GrowBackingFile(string, int64) error { return unsupported("grow backing file") }

// DetachUnder needs Linux's loop driver.
func DetachUnder(string) error { return unsupported("detach loop devices") }
