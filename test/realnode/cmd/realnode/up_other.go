// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package main

import (
	"errors"
	"fmt"
)

var errLinux = fmt.Errorf("the real node needs Linux: %w", errors.ErrUnsupported)

func up(options) error    { return errLinux }
func serve(options) error { return errLinux }
func down(options) error  { return errLinux }
