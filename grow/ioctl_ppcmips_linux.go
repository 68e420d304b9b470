// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build linux && (mips || mipsle || mips64 || mips64le || ppc64 || ppc64le)

package grow

// The powerpc and mips ioctl encoding: three direction bits above a 13-bit
// size, and the write bit is 4.
const (
	iocWrite     = 4
	iocRead      = 2
	iocDirShift  = 29
	iocSizeShift = 16
)
