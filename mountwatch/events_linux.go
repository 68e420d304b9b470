// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// mountEvent is one fanotify mount event: its mask (FAN_MNT_ATTACH,
// FAN_MNT_DETACH, both for a move, or FAN_Q_OVERFLOW) and the unique id
// of the mount it is about (0 for an overflow).
type mountEvent struct {
	Mask uint64
	ID   uint64
}

// parseEvents decodes what one read of a FAN_REPORT_MNT group returned.
// A record it cannot read ends the buffer with an error: the kernel writes
// whole events, so a short or malformed one is a bug, never guessed at.
func parseEvents(b []byte) ([]mountEvent, error) {
	var out []mountEvent
	for len(b) > 0 {
		if len(b) < unix.FAN_EVENT_METADATA_LEN {
			return out, fmt.Errorf("fanotify event of %d bytes is shorter than its metadata", len(b))
		}
		var m unix.FanotifyEventMetadata
		if _, err := binary.Decode(b[:unix.FAN_EVENT_METADATA_LEN], binary.NativeEndian, &m); err != nil {
			return out, fmt.Errorf("decode fanotify metadata: %w", err)
		}
		switch {
		case m.Vers != unix.FANOTIFY_METADATA_VERSION:
			return out, fmt.Errorf("fanotify metadata version %d, want %d", m.Vers, unix.FANOTIFY_METADATA_VERSION)
		case int(m.Event_len) > len(b) || int(m.Metadata_len) > int(m.Event_len) || m.Metadata_len < unix.FAN_EVENT_METADATA_LEN:
			return out, fmt.Errorf("fanotify event length %d (metadata %d) does not fit %d bytes", m.Event_len, m.Metadata_len, len(b))
		}
		ev := mountEvent{Mask: m.Mask}
		id, err := mountIDOf(b[m.Metadata_len:m.Event_len])
		if err != nil {
			return out, err
		}
		ev.ID = id
		out = append(out, ev)
		b = b[m.Event_len:]
	}
	return out, nil
}

// mountIDOf returns the mount id of an event's info records, 0 if it has
// none (an overflow event carries none).
func mountIDOf(info []byte) (uint64, error) {
	for len(info) > 0 {
		var h fanotifyEventInfoHeader
		if _, err := binary.Decode(info, binary.NativeEndian, &h); err != nil {
			return 0, fmt.Errorf("decode fanotify info header: %w", err)
		}
		if int(h.Len) > len(info) || h.Len < 4 {
			return 0, fmt.Errorf("fanotify info record of %d bytes does not fit %d", h.Len, len(info))
		}
		if h.InfoType == unix.FAN_EVENT_INFO_TYPE_MNT {
			var r fanotifyEventInfoMnt
			if h.Len < fanotifyInfoMntSize {
				return 0, fmt.Errorf("fanotify mount record of %d bytes, want %d", h.Len, fanotifyInfoMntSize)
			}
			if _, err := binary.Decode(info[:fanotifyInfoMntSize], binary.NativeEndian, &r); err != nil {
				return 0, fmt.Errorf("decode fanotify mount record: %w", err)
			}
			return r.MntID, nil
		}
		info = info[h.Len:]
	}
	return 0, nil
}
