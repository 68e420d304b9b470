// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build linux && !(mips || mipsle || mips64 || mips64le || ppc64 || ppc64le)

package grow

// The asm-generic ioctl encoding (x86, arm, arm64, riscv, s390, loong64):
// two direction bits above a 14-bit size.
const (
	iocWrite     = 1
	iocRead      = 2
	iocDirShift  = 30
	iocSizeShift = 16
)
