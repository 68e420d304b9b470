// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

// The fanotify ABI golang.org/x/sys/unix does not define (it has the
// FAN_* constants). Checked against include/uapi/linux/fanotify.h;
// abi_linux_test.go holds sizes and offsets. statmount(2) and
// listmount(2) are package mountinfo's, which owns that ABI.

// fanotifyEventInfoHeader is struct fanotify_event_info_header.
type fanotifyEventInfoHeader struct {
	InfoType uint8
	Pad      uint8
	Len      uint16
}

// fanotifyEventInfoMnt is struct fanotify_event_info_mnt: the record a
// FAN_REPORT_MNT group's events carry, info type FAN_EVENT_INFO_TYPE_MNT.
// The padding is spelled out: encoding/binary packs fields, the C
// compiler aligns mnt_id to 8.
type fanotifyEventInfoMnt struct {
	Hdr   fanotifyEventInfoHeader
	_     uint32
	MntID uint64
}

// fanotifyInfoMntSize is sizeof(struct fanotify_event_info_mnt).
const fanotifyInfoMntSize = 16
