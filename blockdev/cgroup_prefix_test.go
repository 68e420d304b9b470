// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// runtimeDeviceProgram is a device program as a container runtime writes
// one: allow the listed character devices (rwm), deny everything else.
func runtimeDeviceProgram(chars ...Device) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	for i, d := range chars {
		next := "next" + string(rune('a'+i))
		insns = append(insns,
			asm.JNE.Imm(asm.R2, 2, next),
			asm.JNE.Imm(asm.R4, int32(d.Major), next),
			asm.JNE.Imm(asm.R5, int32(d.Minor), next),
			asm.Mov.Imm(asm.R0, 1),
			asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(next),
		)
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	return insns
}

// resolved marshals and re-reads insns, as the kernel hands them back:
// raw offsets, no labels or metadata.
func resolved(t *testing.T, insns asm.Instructions) asm.Instructions {
	t.Helper()
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	out, err := asm.AppendInstructions(nil, &buf, binary.LittleEndian, "linux")
	if err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return out
}

func sameInstructions(a, b asm.Instructions) bool {
	return slices.EqualFunc(a, b, sameInstruction)
}

func TestWrapUnwrapDeviceProgram(t *testing.T) {
	tests := []struct {
		name string
		devs []Device
		want []Device
	}{
		{"none", nil, nil},
		{"one", []Device{{7, 3}}, []Device{{7, 3}}},
		{"sorted and deduplicated", []Device{{253, 1}, {7, 3}, {253, 1}, {7, 0}}, []Device{{7, 0}, {7, 3}, {253, 1}}},
		{"largest numbers", []Device{{maxMajor, maxMinor}, {0, 0}}, []Device{{0, 0}, {maxMajor, maxMinor}}},
	}
	body := resolved(t, runtimeDeviceProgram(Device{1, 3}, Device{1, 5}))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrapped, err := WrapDeviceProgram(tt.devs, body)
			if err != nil {
				t.Fatal(err)
			}
			if want := len(body); len(tt.want) > 0 {
				want += prefixHeaderLen + prefixRuleLen*len(tt.want)
				if len(wrapped) != want {
					t.Fatalf("wrapped has %d instructions, want %d", len(wrapped), want)
				}
			} else if !sameInstructions(wrapped, body) {
				t.Fatalf("no devices: wrapped\n%v\nwant the body\n%v", wrapped, body)
			}
			devs, gotBody, err := UnwrapDeviceProgram(resolved(t, wrapped))
			if err != nil {
				t.Fatalf("unwrap:\n%v\n%v", wrapped, err)
			}
			if !slices.Equal(devs, tt.want) {
				t.Errorf("devices %v, want %v", devs, tt.want)
			}
			if !sameInstructions(gotBody, body) {
				t.Errorf("body\n%v\nwant\n%v", gotBody, body)
			}
		})
	}
}

func TestUnwrapRefusesMalformedPrefix(t *testing.T) {
	body := resolved(t, runtimeDeviceProgram(Device{1, 3}))
	good, err := WrapDeviceProgram([]Device{{7, 1}, {7, 2}}, body)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(asm.Instructions) asm.Instructions
	}{
		{"only the marker", func(p asm.Instructions) asm.Instructions { return p[:1] }},
		{"truncated rules", func(p asm.Instructions) asm.Instructions { return p[:prefixHeaderLen+prefixRuleLen] }},
		{"unknown version", func(p asm.Instructions) asm.Instructions { p[1].Constant = 9<<16 | 2; return p }},
		{"count zero", func(p asm.Instructions) asm.Instructions { p[1].Constant = prefixVersion << 16; return p }},
		{"count too large", func(p asm.Instructions) asm.Instructions { p[1].Constant = prefixVersion<<16 | 3; return p }},
		{"negative count word", func(p asm.Instructions) asm.Instructions { p[1].Constant = -1; return p }},
		{"wrong skip offset", func(p asm.Instructions) asm.Instructions { p[4].Offset++; return p }},
		{"rule returns deny", func(p asm.Instructions) asm.Instructions { p[prefixHeaderLen+2].Constant = 0; return p }},
		{"rule jumps elsewhere", func(p asm.Instructions) asm.Instructions { p[prefixHeaderLen].Offset = 1; return p }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			insns := tt.mutate(slices.Clone(good))
			if _, _, err := UnwrapDeviceProgram(insns); !errors.Is(err, ErrBadPrefix) {
				t.Fatalf("err %v, want ErrBadPrefix", err)
			}
		})
	}
}

func TestWrapRefuses(t *testing.T) {
	body := resolved(t, runtimeDeviceProgram(Device{1, 3}))
	wrapped, err := WrapDeviceProgram([]Device{{7, 1}}, body)
	if err != nil {
		t.Fatal(err)
	}
	withCall := append(asm.Instructions{asm.FnGetCurrentUidGid.Call()}, body...)
	withMap := append(asm.Instructions{asm.LoadMapPtr(asm.R2, 3)}, body...)
	tests := []struct {
		name string
		devs []Device
		body asm.Instructions
		want error
	}{
		{"helper call", []Device{{7, 1}}, withCall, ErrNotReloadable},
		{"map reference", []Device{{7, 1}}, withMap, ErrNotReloadable},
		{"empty body", []Device{{7, 1}}, nil, ErrNotReloadable},
		{"body already wrapped", []Device{{7, 2}}, wrapped, ErrBadPrefix},
		{"major out of range", []Device{{maxMajor + 1, 0}}, body, ErrInvalidDevice},
		{"minor out of range", []Device{{7, maxMinor + 1}}, body, ErrInvalidDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := WrapDeviceProgram(tt.devs, tt.body); !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWithDevice(t *testing.T) {
	a, b := Device{7, 1}, Device{7, 2}
	tests := []struct {
		name        string
		devs        []Device
		allow       bool
		want        []Device
		wantChanged bool
	}{
		{"allow new", []Device{a}, true, []Device{a, b}, true},
		{"allow again", []Device{a, b}, true, []Device{a, b}, false},
		{"deny present", []Device{a, b}, false, []Device{a}, true},
		{"deny absent", []Device{a}, false, []Device{a}, false},
		{"deny last", []Device{b}, false, []Device{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := slices.Clone(tt.devs)
			got, changed := withDevice(tt.devs, b, tt.allow)
			if changed != tt.wantChanged || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v changed=%v, want %v changed=%v", got, changed, tt.want, tt.wantChanged)
			}
			if !slices.Equal(tt.devs, orig) {
				t.Fatalf("input modified: %v", tt.devs)
			}
		})
	}
}
