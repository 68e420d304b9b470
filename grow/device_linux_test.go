// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"encoding/binary"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseUevent(t *testing.T) {
	tests := []struct {
		name, text string
		want       string
		wantErr    string
	}{
		{"loop", "MAJOR=7\nMINOR=3\nDEVNAME=loop3\nDEVTYPE=disk\nDISKSEQ=12\n", "loop3", ""},
		{"mapper name comes as dm-N", "MAJOR=7\nMINOR=3\nDEVNAME=dm-0\n", "dm-0", ""},
		{"other device", "MAJOR=8\nMINOR=0\nDEVNAME=sda\n", "", "names device 8:0"},
		{"no devname", "MAJOR=7\nMINOR=3\n", "", "no DEVNAME"},
		{"no numbers", "DEVNAME=loop3\n", "", "names device -1:-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseUevent([]byte(tt.text), 7, 3)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseUevent = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseExtSuperblock(t *testing.T) {
	sb := func(blocksLo, blocksHi, logBS, incompat uint32, magic uint16) []byte {
		b := make([]byte, 1024)
		le := binary.LittleEndian
		le.PutUint32(b[0x04:], blocksLo)
		le.PutUint32(b[0x18:], logBS)
		le.PutUint16(b[0x38:], magic)
		le.PutUint32(b[0x60:], incompat)
		le.PutUint32(b[0x150:], blocksHi)
		return b
	}
	tests := []struct {
		name    string
		sb      []byte
		want    int64
		wantErr bool
	}{
		{"400 MiB of 4 KiB blocks", sb(102400, 0, 2, 0, 0xEF53), 400 << 20, false},
		{"high word ignored without 64bit", sb(1, 1, 2, 0, 0xEF53), 4096, false},
		{"64bit: 16 TiB + 4 KiB", sb(1, 1, 2, 0x80, 0xEF53), 1<<44 + 4096, false},
		{"1 KiB blocks", sb(2048, 0, 0, 0, 0xEF53), 2 << 20, false},
		{"bad magic", sb(102400, 0, 2, 0, 0x1234), 0, true},
		{"absurd block size", sb(1, 0, 30, 0, 0xEF53), 0, true},
		{"short", make([]byte, 100), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			geo, err := parseExtSuperblock(tt.sb)
			var got int64
			if err == nil {
				got, err = geo.bytes()
			}
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseExtSuperblock = %+v (%d bytes), %v; want %d, error %v", geo, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCapEff(t *testing.T) {
	tests := []struct {
		name, status string
		want         uint64
		ok           bool
	}{
		{"this machine: no CAP_SYS_RESOURCE", "Name:\tcat\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\n" +
			"CapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n", 0x1fffeffffff, true},
		{"full set", "CapEff:\t000001ffffffffff\n", 0x1ffffffffff, true},
		{"no CapEff line", "Name:\tcat\nCapBnd:\t000001ffffffffff\n", 0, false},
		{"garbled", "CapEff:\tzz\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := capEff([]byte(tt.status))
			if got != tt.want || ok != tt.ok {
				t.Fatalf("capEff = %#x, %v; want %#x, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	if eff, _ := capEff([]byte("CapEff:\t000001fffeffffff\n")); eff&(1<<capSysResource) != 0 {
		t.Errorf("bit %d is not CAP_SYS_RESOURCE", capSysResource)
	}
	if capSysResource != unix.CAP_SYS_RESOURCE {
		t.Errorf("capSysResource = %d, want %d", capSysResource, unix.CAP_SYS_RESOURCE)
	}
}

// TestResizeIoctlLayout holds the structures to the kernel's sizes
// (xfs_fs.h: struct xfs_fsop_geom_v1 is 112 bytes, struct xfs_growfs_data
// 16) and the numbers built from them to the kernel's values, and checks
// the encoding against ioctl numbers golang.org/x/sys defines for this
// architecture.
func TestResizeIoctlLayout(t *testing.T) {
	if s := unsafe.Sizeof(xfsGeometryV1{}); s != 112 {
		t.Errorf("xfsGeometryV1 is %d bytes, want 112", s)
	}
	if s := unsafe.Sizeof(xfsGrowfsData{}); s != 16 {
		t.Errorf("xfsGrowfsData is %d bytes, want 16", s)
	}
	if o := unsafe.Offsetof(xfsGeometryV1{}.DataBlocks); o != 32 {
		t.Errorf("datablocks at offset %d, want 32", o)
	}
	if o := unsafe.Offsetof(xfsGrowfsData{}.IMaxPct); o != 8 {
		t.Errorf("imaxpct at offset %d, want 8", o)
	}
	// The same encoding must give the numbers x/sys has for this
	// architecture: _IOR(0x12, 114, size_t) and _IOW('f', 2, long).
	if got := ioc(iocRead, 0x12, 114, unsafe.Sizeof(uintptr(0))); got != uintptr(unix.BLKGETSIZE64) {
		t.Errorf("ioc(read) = %#x, BLKGETSIZE64 is %#x", got, uintptr(unix.BLKGETSIZE64))
	}
	if got := ioc(iocWrite, 'f', 2, unsafe.Sizeof(uintptr(0))); got != uintptr(unix.FS_IOC_SETFLAGS) {
		t.Errorf("ioc(write) = %#x, FS_IOC_SETFLAGS is %#x", got, uintptr(unix.FS_IOC_SETFLAGS))
	}
	if iocDirShift != 30 {
		return // the values below are the asm-generic ones
	}
	for _, tt := range []struct {
		name      string
		got, want uintptr
	}{
		{"XFS_IOC_FSGEOMETRY_V1", xfsIocFSGeometryV1, 0x80705864},
		{"XFS_IOC_FSGROWFSDATA", xfsIocFSGrowFSData, 0x4010586e},
		{"EXT4_IOC_RESIZE_FS", ext4IocResizeFS, 0x40086610},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
		}
	}
}
