// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf/asm"
)

func TestEvalDeviceProgram(t *testing.T) {
	loop, other, null := Device{7, 3}, Device{7, 4}, Device{1, 3}
	runtime := resolved(t, runtimeDeviceProgram(null))
	wrapped, err := WrapDeviceProgram([]Device{loop}, runtime)
	if err != nil {
		t.Fatal(err)
	}
	denyAll := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	// As systemd writes it: the type through a 16-bit load, the access
	// through a shift, a 64-bit constant (two raw slots) before a jump
	// that must land past it, and an unconditional jump.
	systemdLike := resolved(t, asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Half),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),
		asm.LoadImm(asm.R6, 1<<40, asm.DWord),
		asm.JNE.Imm(asm.R2, devcgDevBlock, "deny"),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.JNE.Imm32(asm.R4, int32(loop.Major), "deny"),
		asm.JSet.Imm(asm.R3, devcgAccMknod, "deny"), // no mknod
		asm.Mov.Imm(asm.R0, 1),
		asm.Ja.Label("out"),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("deny"),
		asm.Return().WithSymbol("out"),
	})
	tests := []struct {
		name   string
		insns  asm.Instructions
		dev    Device
		denied string
	}{
		{"runtime program denies a block device", runtime, loop, "r"},
		{"hpmount's prefix allows it", wrapped, loop, ""},
		{"the prefix allows only its device", wrapped, other, "r"},
		{"deny all", denyAll, loop, "r"},
		{"systemd-like allows r and w, not m", systemdLike, loop, "m"},
		{"systemd-like, other major", systemdLike, Device{8, 0}, "r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := deniedAccess(tt.insns, tt.dev)
			if err != nil || got != tt.denied {
				t.Fatalf("deniedAccess = %q, %v; want %q", got, err, tt.denied)
			}
		})
	}
	// The char device the runtime allows, asked directly.
	if ok, err := EvalDeviceProgram(runtime, devcgAccRead<<16|2, 1, 3); err != nil || !ok {
		t.Fatalf("runtime program on c 1:3 = %v, %v; want allowed", ok, err)
	}
}

func TestEvalDeviceProgramRefuses(t *testing.T) {
	tests := []struct {
		name  string
		insns asm.Instructions
	}{
		{"helper call", asm.Instructions{asm.FnGetCurrentUidGid.Call(), asm.Return()}},
		{"stack store", asm.Instructions{asm.StoreImm(asm.R10, -8, 1, asm.Word), asm.Mov.Imm(asm.R0, 1), asm.Return()}},
		{"load past the context", asm.Instructions{asm.LoadMem(asm.R2, asm.R1, 12, asm.Word), asm.Mov.Imm(asm.R0, 1), asm.Return()}},
		{"map reference", asm.Instructions{asm.LoadMapPtr(asm.R2, 3), asm.Mov.Imm(asm.R0, 1), asm.Return()}},
		{"arithmetic on the context", asm.Instructions{asm.Add.Imm(asm.R1, 4), asm.Mov.Imm(asm.R0, 1), asm.Return()}},
		{"falls off the end", asm.Instructions{asm.Mov.Imm(asm.R0, 1)}},
		{"loops for ever", asm.Instructions{asm.Ja.Label("top").WithSymbol("top")}},
		{"empty", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			insns := tt.insns
			if len(insns) > 0 {
				insns = resolved(t, insns)
			}
			if _, err := deniedAccess(insns, Device{7, 0}); !errors.Is(err, ErrNotEvaluable) {
				t.Fatalf("deniedAccess = %v, want ErrNotEvaluable", err)
			}
		})
	}
}
