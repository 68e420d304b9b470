// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// ErrNotEvaluable is wrapped when a device program uses an instruction
// EvalDeviceProgram does not run (calls, maps, the stack, atomics, byte
// swaps, signed division): whether it allows a device cannot be told.
var ErrNotEvaluable = errors.New("device program cannot be evaluated")

// Access bits of bpf_cgroup_dev_ctx.access_type's upper half
// (BPF_DEVCG_ACC_*).
const (
	devcgAccMknod = 1 << 0
	devcgAccRead  = 1 << 1
	devcgAccWrite = 1 << 2
)

// deviceAccesses are the requests a device must pass to count as allowed:
// each access alone and read-write together (an O_RDWR open asks for both
// at once), as hpmount's own rules grant them all.
var deviceAccesses = []struct {
	bits uint32
	name string
}{
	{devcgAccRead, "r"}, {devcgAccWrite, "w"}, {devcgAccMknod, "m"}, {devcgAccRead | devcgAccWrite, "rw"},
}

// maxEvalSteps bounds one run: device programs are straight lines and
// forward jumps, a few hundred instructions.
const maxEvalSteps = 1 << 16

// ctxSize is sizeof(struct bpf_cgroup_dev_ctx): access_type, major, minor.
const ctxSize = 12

// deniedAccess runs a device program for every access in deviceAccesses to
// the block device d and returns the first one it refuses, "" if none.
func deniedAccess(insns asm.Instructions, d Device) (string, error) {
	for _, a := range deviceAccesses {
		ok, err := EvalDeviceProgram(insns, a.bits<<16|devcgDevBlock, d.Major, d.Minor)
		if err != nil {
			return "", err
		}
		if !ok {
			return a.name, nil
		}
	}
	return "", nil
}

// EvalDeviceProgram runs a BPF_PROG_TYPE_CGROUP_DEVICE program, as read
// back from the kernel, on one request (accessType is (access << 16) |
// type, as in bpf_cgroup_dev_ctx) and reports whether it allows it: a
// non-zero return, as the kernel reads it. Only what device programs are
// made of is run (ALU, loads from the context, jumps, exit); anything else
// wraps ErrNotEvaluable.
func EvalDeviceProgram(insns asm.Instructions, accessType, major, minor uint32) (bool, error) {
	var ctx [ctxSize]byte
	binary.NativeEndian.PutUint32(ctx[0:], accessType)
	binary.NativeEndian.PutUint32(ctx[4:], major)
	binary.NativeEndian.PutUint32(ctx[8:], minor)
	at, err := rawIndex(insns)
	if err != nil {
		return false, err
	}
	m := machine{ctx: ctx}
	m.isCtx[asm.R1] = true
	for pc, steps := 0, 0; ; steps++ {
		if pc < 0 || pc >= len(insns) || steps >= maxEvalSteps {
			return false, fmt.Errorf("run left the program at instruction %d after %d steps: %w", pc, steps, ErrNotEvaluable)
		}
		in := insns[pc]
		next, exit, err := m.step(in)
		if err != nil {
			return false, fmt.Errorf("instruction %d (%v): %w", pc, in, err)
		}
		if exit {
			return uint32(m.r[asm.R0]) != 0, nil
		}
		if next == 0 {
			pc++
			continue
		}
		// Jump offsets count raw 8-byte slots from the next one.
		raw := at.slot[pc] + 1 + int(next)
		i, ok := at.index[raw]
		if !ok {
			return false, fmt.Errorf("instruction %d jumps to slot %d, no instruction starts there: %w", pc, raw, ErrNotEvaluable)
		}
		pc = i
	}
}

// rawSlots maps instructions to the raw slots they start at: a 64-bit
// immediate load takes two.
type rawSlots struct {
	slot  []int
	index map[int]int
}

func rawIndex(insns asm.Instructions) (rawSlots, error) {
	r := rawSlots{slot: make([]int, len(insns)), index: make(map[int]int, len(insns))}
	raw := 0
	for i, in := range insns {
		r.slot[i], r.index[raw] = raw, i
		raw += int(in.Size() / asm.InstructionSize)
	}
	if len(insns) == 0 {
		return r, fmt.Errorf("empty program: %w", ErrNotEvaluable)
	}
	return r, nil
}

// machine is the state of one run: registers, and which of them hold the
// context pointer (R1 on entry).
type machine struct {
	r     [11]uint64
	isCtx [11]bool
	ctx   [ctxSize]byte
}

// step runs one instruction and returns the jump offset taken (0 for the
// next instruction) or exit.
func (m *machine) step(in asm.Instruction) (jump int64, exit bool, err error) {
	if in.Dst > asm.R10 || in.Src > asm.R10 {
		return 0, false, fmt.Errorf("register out of range: %w", ErrNotEvaluable)
	}
	switch c := in.OpCode.Class(); {
	case c.IsALU():
		return 0, false, m.alu(in)
	case c.IsJump():
		return m.jump(in)
	case in.OpCode == ldImm64Op && in.Src == 0:
		m.set(in.Dst, uint64(in.Constant))
		return 0, false, nil
	case c == asm.LdXClass && in.OpCode.Mode() == asm.MemMode:
		return 0, false, m.load(in)
	}
	return 0, false, fmt.Errorf("not a context load, ALU or jump: %w", ErrNotEvaluable)
}

func (m *machine) set(r asm.Register, v uint64) { m.r[r], m.isCtx[r] = v, false }

func (m *machine) load(in asm.Instruction) error {
	if !m.isCtx[in.Src] {
		return fmt.Errorf("load from memory other than the context: %w", ErrNotEvaluable)
	}
	n := int(in.OpCode.Size().Sizeof())
	off := int(in.Offset)
	if n != 1 && n != 2 && n != 4 && n != 8 || off < 0 || off+n > ctxSize {
		return fmt.Errorf("context load of %d bytes at %d: %w", n, off, ErrNotEvaluable)
	}
	b, ne := m.ctx[off:off+n], binary.NativeEndian
	switch n {
	case 1:
		m.set(in.Dst, uint64(b[0]))
	case 2:
		m.set(in.Dst, uint64(ne.Uint16(b)))
	case 4:
		m.set(in.Dst, uint64(ne.Uint32(b)))
	default:
		m.set(in.Dst, ne.Uint64(b))
	}
	return nil
}

// operand is the instruction's source: an immediate or a register.
func (m *machine) operand(in asm.Instruction) (uint64, error) {
	if in.OpCode.Source() == asm.RegSource {
		if m.isCtx[in.Src] {
			return 0, fmt.Errorf("arithmetic on the context pointer: %w", ErrNotEvaluable)
		}
		return m.r[in.Src], nil
	}
	return uint64(in.Constant), nil
}

func (m *machine) alu(in asm.Instruction) error {
	op := in.OpCode.ALUOp()
	if op == asm.Mov && in.OpCode.Source() == asm.RegSource && in.OpCode.Class() == asm.ALU64Class && in.Offset == 0 {
		m.r[in.Dst], m.isCtx[in.Dst] = m.r[in.Src], m.isCtx[in.Src]
		return nil
	}
	if m.isCtx[in.Dst] && op != asm.Mov || in.Offset != 0 {
		return fmt.Errorf("ALU on the context pointer or a signed variant: %w", ErrNotEvaluable)
	}
	src, err := m.operand(in)
	if err != nil {
		return err
	}
	dst := m.r[in.Dst]
	wide := in.OpCode.Class() == asm.ALU64Class
	if !wide {
		dst, src = uint64(uint32(dst)), uint64(uint32(src))
	}
	v, err := aluOp(op, dst, src, wide)
	if err != nil {
		return err
	}
	if !wide {
		v = uint64(uint32(v))
	}
	m.set(in.Dst, v)
	return nil
}

func aluOp(op asm.ALUOp, dst, src uint64, wide bool) (uint64, error) {
	bits := uint64(31)
	if wide {
		bits = 63
	}
	switch op {
	case asm.Mov:
		return src, nil
	case asm.Add:
		return dst + src, nil
	case asm.Sub:
		return dst - src, nil
	case asm.Mul:
		return dst * src, nil
	case asm.Div:
		if src == 0 {
			return 0, nil // BPF: division by zero yields 0
		}
		return dst / src, nil
	case asm.Mod:
		if src == 0 {
			return dst, nil // BPF: modulo by zero leaves dst
		}
		return dst % src, nil
	case asm.Or:
		return dst | src, nil
	case asm.And:
		return dst & src, nil
	case asm.Xor:
		return dst ^ src, nil
	case asm.LSh:
		return dst << (src & bits), nil
	case asm.RSh:
		return dst >> (src & bits), nil
	case asm.ArSh:
		if wide {
			return uint64(int64(dst) >> (src & bits)), nil
		}
		return uint64(uint32(int32(uint32(dst)) >> (src & bits))), nil
	case asm.Neg:
		return -dst, nil
	}
	return 0, fmt.Errorf("ALU operation %v: %w", op, ErrNotEvaluable)
}

func (m *machine) jump(in asm.Instruction) (int64, bool, error) {
	op := in.OpCode.JumpOp()
	switch op {
	case asm.Exit:
		return 0, true, nil
	case asm.Ja:
		if in.OpCode.Class() == asm.Jump32Class {
			return in.Constant, false, nil // gotol: the offset is the immediate
		}
		return int64(in.Offset), false, nil
	}
	if m.isCtx[in.Dst] {
		return 0, false, fmt.Errorf("comparison of the context pointer: %w", ErrNotEvaluable)
	}
	src, err := m.operand(in)
	if err != nil {
		return 0, false, err
	}
	dst := m.r[in.Dst]
	var sdst, ssrc int64 = int64(dst), int64(src)
	if in.OpCode.Class() == asm.Jump32Class {
		dst, src = uint64(uint32(dst)), uint64(uint32(src))
		sdst, ssrc = int64(int32(uint32(dst))), int64(int32(uint32(src)))
	}
	taken, err := compare(op, dst, src, sdst, ssrc)
	if err != nil || !taken {
		return 0, false, err
	}
	if in.Offset == 0 {
		return 0, false, nil
	}
	return int64(in.Offset), false, nil
}

func compare(op asm.JumpOp, dst, src uint64, sdst, ssrc int64) (bool, error) {
	switch op {
	case asm.JEq:
		return dst == src, nil
	case asm.JNE:
		return dst != src, nil
	case asm.JGT:
		return dst > src, nil
	case asm.JGE:
		return dst >= src, nil
	case asm.JLT:
		return dst < src, nil
	case asm.JLE:
		return dst <= src, nil
	case asm.JSet:
		return dst&src != 0, nil
	case asm.JSGT:
		return sdst > ssrc, nil
	case asm.JSGE:
		return sdst >= ssrc, nil
	case asm.JSLT:
		return sdst < ssrc, nil
	case asm.JSLE:
		return sdst <= ssrc, nil
	}
	return false, fmt.Errorf("jump operation %v: %w", op, ErrNotEvaluable)
}
