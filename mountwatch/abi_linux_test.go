// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestABI holds the structures defined here to the kernel's layout
// (include/uapi/linux/fanotify.h): the size
// the C compiler gives them, the offsets of the fields read, and that
// encoding/binary, which packs fields, reads the same bytes.
func TestABI(t *testing.T) {
	var mnt fanotifyEventInfoMnt
	for _, tc := range []struct {
		name       string
		size, want uintptr
		packed     int
	}{
		{"fanotify_event_info_header", unsafe.Sizeof(fanotifyEventInfoHeader{}), 4, binary.Size(fanotifyEventInfoHeader{})},
		{"fanotify_event_info_mnt", unsafe.Sizeof(mnt), fanotifyInfoMntSize, binary.Size(mnt)},
		{"fanotify_event_info_mnt.mnt_id", unsafe.Offsetof(mnt.MntID), 8, -1},
	} {
		if tc.size != tc.want {
			t.Errorf("%s: %d, kernel %d", tc.name, tc.size, tc.want)
		}
		if tc.packed >= 0 && uintptr(tc.packed) != tc.want {
			t.Errorf("%s: encoding/binary reads %d bytes, kernel %d", tc.name, tc.packed, tc.want)
		}
	}
}
