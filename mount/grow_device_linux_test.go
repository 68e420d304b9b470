package mount

import (
	"encoding/binary"
	"strings"
	"testing"
	"unsafe"
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
			got, err := parseExtSuperblock(tt.sb)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseExtSuperblock = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCapMasks(t *testing.T) {
	const status = "Name:\tcat\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\n" +
		"CapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n"
	eff, bnd, ok := capMasks([]byte(status))
	if !ok || eff != 0x1fffeffffff || bnd != 0x1fffeffffff {
		t.Fatalf("capMasks = %x, %x, %v", eff, bnd, ok)
	}
	if eff&(1<<capSysResource) != 0 {
		t.Errorf("bit %d set in %x: this machine's mask lacks CAP_SYS_RESOURCE", capSysResource, eff)
	}
	if _, _, ok := capMasks([]byte("Name:\tcat\n")); ok {
		t.Error("capMasks without Cap lines says ok")
	}
}

func TestXFSGeometryIoctlNumber(t *testing.T) {
	// struct xfs_fsop_geom_v1 is 112 bytes; the ioctl is 0x80705864.
	if s := unsafe.Sizeof(xfsGeometryV1{}); s != 112 {
		t.Fatalf("xfsGeometryV1 is %d bytes, want 112", s)
	}
	if xfsIocFSGeometryV1 != 0x80705864 {
		t.Fatalf("XFS_IOC_FSGEOMETRY_V1 = %#x, want 0x80705864", xfsIocFSGeometryV1)
	}
}
