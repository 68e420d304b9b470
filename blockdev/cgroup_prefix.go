// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"
)

// The prefix hpmount puts in front of a cgroup device program:
//
//	0: r2 = prefixMagic            marker
//	1: r3 = version<<16 | count    marker: prefix version and rule count
//	2: r2 = *(u32 *)(r1 + 0)       access_type: (access << 16) | dev type
//	3: r2 &= 0xffff                dev type
//	4: if r2 != BLOCK goto body
//	5: r4 = *(u32 *)(r1 + 4)       major
//	6: r5 = *(u32 *)(r1 + 8)       minor
//	per rule:
//	   if w4 != MAJOR goto +3
//	   if w5 != MINOR goto +2
//	   r0 = 1                      allow, any access
//	   exit
//	body: the original program, unchanged
//
// R1 (the context) is never written, so the body starts in the state the
// verifier gave the original program: R1 = ctx, R10 = frame pointer, and
// nothing else read before written.
const (
	prefixMagic      = 0x68706d74 // "hpmt"
	prefixVersion    = 1
	prefixHeaderLen  = 7
	prefixRuleLen    = 4
	maxPrefixDevices = 4096

	devcgDevBlock = 1 // BPF_DEVCG_DEV_BLOCK
)

// ErrNotReloadable is wrapped when a device program cannot be reloaded from
// its translated instructions (it uses maps or calls).
var ErrNotReloadable = errors.New("device program cannot be reloaded unchanged")

// ErrBlinded is wrapped when a device program reads back with blinded
// constants: with net.core.bpf_jit_harden set, the kernel hands out the
// JIT's rewritten instructions (each constant split through the hidden
// register R11), which neither show hpmount's prefix nor load again. Such a
// program cannot be changed faithfully, so it is not changed at all.
var ErrBlinded = errors.New("device program reads back blinded (net.core.bpf_jit_harden): its instructions cannot be reloaded faithfully")

// ErrLinkAttached is wrapped when a device program is attached through a
// bpf_link: BPF_F_REPLACE swaps only programs attached with BPF_PROG_ATTACH,
// and the link's owner, not hpmount, decides what it runs.
var ErrLinkAttached = errors.New("device program is attached through a bpf_link and cannot be replaced")

// regAX is BPF_REG_AX (R11), the kernel's hidden register: it appears in
// translated instructions only where the JIT blinded a constant.
const regAX = asm.Register(11)

// CheckNotBlinded refuses instructions read back from the kernel that use
// R11: blinded constants (see ErrBlinded).
func CheckNotBlinded(insns asm.Instructions) error {
	for i, in := range insns {
		if in.Dst == regAX || in.Src == regAX {
			return fmt.Errorf("instruction %d (%v) uses R11: %w", i, in, ErrBlinded)
		}
	}
	return nil
}

// ErrBadPrefix is wrapped when a program starts with hpmount's marker but the
// rest of the prefix does not parse.
var ErrBadPrefix = errors.New("malformed hpmount device-program prefix")

var (
	jne32Imm  = asm.OpCode(asm.Jump32Class).SetJumpOp(asm.JNE).SetSource(asm.ImmSource)
	jne64Imm  = asm.OpCode(asm.JumpClass).SetJumpOp(asm.JNE).SetSource(asm.ImmSource)
	mov64Imm  = asm.OpCode(asm.ALU64Class).SetALUOp(asm.Mov).SetSource(asm.ImmSource)
	and64Imm  = asm.OpCode(asm.ALU64Class).SetALUOp(asm.And).SetSource(asm.ImmSource)
	exitOp    = asm.OpCode(asm.JumpClass).SetJumpOp(asm.Exit)
	loadWord  = asm.LoadMemOp(asm.Word)
	callOp    = asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call)
	ldImm64Op = asm.LoadImmOp(asm.DWord)
)

// DeviceProgram is a device program attached to a cgroup, as read back from
// the kernel (see AttachedDevicePrograms and UnwrapDeviceProgram).
type DeviceProgram struct {
	ID           uint32 // kernel program ID
	AttachFlags  uint32 // the cgroup's BPF_F_* attach flags for device programs
	Instructions asm.Instructions
}

func ins(op asm.OpCode, dst, src asm.Register, off int16, c int64) asm.Instruction {
	return asm.Instruction{OpCode: op, Dst: dst, Src: src, Offset: off, Constant: c}
}

func prefixHeader(n int) asm.Instructions {
	return asm.Instructions{
		ins(mov64Imm, asm.R2, 0, 0, prefixMagic),
		ins(mov64Imm, asm.R3, 0, 0, int64(prefixVersion<<16|n)),
		ins(loadWord, asm.R2, asm.R1, 0, 0),
		ins(and64Imm, asm.R2, 0, 0, 0xffff),
		ins(jne64Imm, asm.R2, 0, int16(2+prefixRuleLen*n), devcgDevBlock),
		ins(loadWord, asm.R4, asm.R1, 4, 0),
		ins(loadWord, asm.R5, asm.R1, 8, 0),
	}
}

func prefixRule(d Device) asm.Instructions {
	return asm.Instructions{
		ins(jne32Imm, asm.R4, 0, 3, int64(int32(d.Major))),
		ins(jne32Imm, asm.R5, 0, 2, int64(int32(d.Minor))),
		ins(mov64Imm, asm.R0, 0, 0, 1),
		ins(exitOp, 0, 0, 0, 0),
	}
}

// normalizeDevices validates, sorts and de-duplicates devs.
func normalizeDevices(devs []Device) ([]Device, error) {
	out := slices.Clone(devs)
	for _, d := range out {
		if err := d.Validate(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Device) int {
		if a.Major != b.Major {
			return int(a.Major) - int(b.Major)
		}
		return int(a.Minor) - int(b.Minor)
	})
	out = slices.Compact(out)
	if len(out) > maxPrefixDevices {
		return nil, fmt.Errorf("%d devices in one device program: at most %d", len(out), maxPrefixDevices)
	}
	return out, nil
}

// WrapDeviceProgram returns body preceded by hpmount's prefix allowing devs
// (block devices, any access). With no devices, body is returned alone. The
// devices are sorted and de-duplicated; body must not itself carry a prefix.
func WrapDeviceProgram(devs []Device, body asm.Instructions) (asm.Instructions, error) {
	if err := CheckReloadable(body); err != nil {
		return nil, err
	}
	if hasMarker(body) {
		return nil, fmt.Errorf("wrap device program: body already carries an hpmount prefix: %w", ErrBadPrefix)
	}
	devs, err := normalizeDevices(devs)
	if err != nil {
		return nil, err
	}
	out := make(asm.Instructions, 0, prefixHeaderLen+prefixRuleLen*len(devs)+len(body))
	if len(devs) > 0 {
		out = append(out, prefixHeader(len(devs))...)
		for _, d := range devs {
			out = append(out, prefixRule(d)...)
		}
	}
	for _, in := range body {
		in.Metadata = asm.Metadata{} // no symbols or BTF info mid-program
		out = append(out, in)
	}
	return out, nil
}

func hasMarker(insns asm.Instructions) bool {
	return len(insns) > 0 && sameInstruction(insns[0], prefixHeader(0)[0])
}

// UnwrapDeviceProgram splits a device program into the devices allowed by
// hpmount's prefix and the original body. A program without the prefix is
// returned whole as the body with no devices.
func UnwrapDeviceProgram(insns asm.Instructions) ([]Device, asm.Instructions, error) {
	if !hasMarker(insns) {
		return nil, insns, nil
	}
	if len(insns) < prefixHeaderLen {
		return nil, nil, fmt.Errorf("%d instructions, header needs %d: %w", len(insns), prefixHeaderLen, ErrBadPrefix)
	}
	vc := insns[1]
	if vc.OpCode != mov64Imm || vc.Dst != asm.R3 || vc.Constant < 0 || vc.Constant > 0xffffffff {
		return nil, nil, fmt.Errorf("version/count instruction %v: %w", vc, ErrBadPrefix)
	}
	if v := vc.Constant >> 16; v != prefixVersion {
		return nil, nil, fmt.Errorf("prefix version %d, this build knows %d: %w", v, prefixVersion, ErrBadPrefix)
	}
	n := int(vc.Constant & 0xffff)
	if n == 0 || n > maxPrefixDevices || len(insns) < prefixHeaderLen+prefixRuleLen*n+1 {
		return nil, nil, fmt.Errorf("%d rules in %d instructions: %w", n, len(insns), ErrBadPrefix)
	}
	for i, want := range prefixHeader(n) {
		if !sameInstruction(insns[i], want) {
			return nil, nil, fmt.Errorf("header instruction %d is %v, want %v: %w", i, insns[i], want, ErrBadPrefix)
		}
	}
	devs := make([]Device, 0, n)
	for r := 0; r < n; r++ {
		at := prefixHeaderLen + prefixRuleLen*r
		d := Device{Major: uint32(insns[at].Constant), Minor: uint32(insns[at+1].Constant)}
		for i, want := range prefixRule(d) {
			if !sameInstruction(insns[at+i], want) {
				return nil, nil, fmt.Errorf("rule %d instruction %d is %v, want %v: %w", r, i, insns[at+i], want, ErrBadPrefix)
			}
		}
		devs = append(devs, d)
	}
	return devs, insns[prefixHeaderLen+prefixRuleLen*n:], nil
}

// CheckReloadable refuses instructions that do not load again unchanged as a
// new program: translated map references and calls carry kernel-internal
// values.
func CheckReloadable(body asm.Instructions) error {
	if len(body) == 0 {
		return fmt.Errorf("empty device program: %w", ErrNotReloadable)
	}
	for i, in := range body {
		switch {
		case in.OpCode == callOp || (in.OpCode.Class() == asm.Jump32Class && in.OpCode.JumpOp() == asm.Call):
			return fmt.Errorf("instruction %d (%v) is a call: %w", i, in, ErrNotReloadable)
		case in.OpCode == ldImm64Op && in.Src != 0:
			return fmt.Errorf("instruction %d (%v) references a map or kernel object: %w", i, in, ErrNotReloadable)
		}
	}
	return nil
}

func sameInstruction(a, b asm.Instruction) bool {
	return a.OpCode == b.OpCode && a.Dst == b.Dst && a.Src == b.Src && a.Offset == b.Offset && a.Constant == b.Constant
}

// withDevice returns devs with d added (allow) or removed, and whether that
// changed anything.
func withDevice(devs []Device, d Device, allow bool) ([]Device, bool) {
	has := slices.Contains(devs, d)
	switch {
	case allow && !has:
		return append(slices.Clone(devs), d), true
	case !allow && has:
		return slices.DeleteFunc(slices.Clone(devs), func(x Device) bool { return x == d }), true
	}
	return devs, false
}
