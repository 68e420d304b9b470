// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mountEvent is one fanotify mount event: its mask (FAN_MNT_ATTACH,
// FAN_MNT_DETACH, both for a move, or FAN_Q_OVERFLOW) and the unique id
// of the mount it is about (0 for an overflow).
type mountEvent struct {
	Mask uint64
	ID   uint64
}

// Offsets of the fields read in place (TestABI holds the structures to
// the kernel's layout): a burst of pod starts is thousands of events.
var (
	meta    unix.FanotifyEventMetadata
	infoMnt fanotifyEventInfoMnt
)

const (
	offEventLen    = unsafe.Offsetof(meta.Event_len)
	offVers        = unsafe.Offsetof(meta.Vers)
	offMetadataLen = unsafe.Offsetof(meta.Metadata_len)
	offEventMask   = unsafe.Offsetof(meta.Mask)
	offInfoType    = unsafe.Offsetof(infoMnt.Hdr) + unsafe.Offsetof(infoMnt.Hdr.InfoType)
	offInfoLen     = unsafe.Offsetof(infoMnt.Hdr) + unsafe.Offsetof(infoMnt.Hdr.Len)
	offInfoMntID   = unsafe.Offsetof(infoMnt.MntID)
)

// parseEvents decodes what one read of a FAN_REPORT_MNT group returned.
// A record it cannot read ends the buffer with an error: the kernel writes
// whole events, so a short or malformed one is a bug, never guessed at.
func parseEvents(b []byte) ([]mountEvent, error) {
	var out []mountEvent
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < unix.FAN_EVENT_METADATA_LEN {
			return out, fmt.Errorf("fanotify event of %d bytes is shorter than its metadata", len(b))
		}
		evLen, metaLen := int(ne.Uint32(b[offEventLen:])), int(ne.Uint16(b[offMetadataLen:]))
		switch {
		case b[offVers] != unix.FANOTIFY_METADATA_VERSION:
			return out, fmt.Errorf("fanotify metadata version %d, want %d", b[offVers], unix.FANOTIFY_METADATA_VERSION)
		case evLen > len(b) || metaLen > evLen || metaLen < unix.FAN_EVENT_METADATA_LEN:
			return out, fmt.Errorf("fanotify event length %d (metadata %d) does not fit %d bytes", evLen, metaLen, len(b))
		}
		id, err := mountIDOf(b[metaLen:evLen])
		if err != nil {
			return out, err
		}
		out = append(out, mountEvent{Mask: ne.Uint64(b[offEventMask:]), ID: id})
		b = b[evLen:]
	}
	return out, nil
}

// mountIDOf returns the mount id of an event's info records, 0 if it has
// none (an overflow event carries none).
func mountIDOf(info []byte) (uint64, error) {
	for len(info) > 0 {
		if len(info) < int(unsafe.Sizeof(fanotifyEventInfoHeader{})) {
			return 0, fmt.Errorf("fanotify info record of %d bytes is shorter than its header", len(info))
		}
		n := int(binary.NativeEndian.Uint16(info[offInfoLen:]))
		if n > len(info) || n < int(unsafe.Sizeof(fanotifyEventInfoHeader{})) {
			return 0, fmt.Errorf("fanotify info record of %d bytes does not fit %d", n, len(info))
		}
		if info[offInfoType] == unix.FAN_EVENT_INFO_TYPE_MNT {
			if n < fanotifyInfoMntSize {
				return 0, fmt.Errorf("fanotify mount record of %d bytes, want %d", n, fanotifyInfoMntSize)
			}
			return binary.NativeEndian.Uint64(info[offInfoMntID:]), nil
		}
		info = info[n:]
	}
	return 0, nil
}
