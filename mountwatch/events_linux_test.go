// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"encoding/binary"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// event encodes one fanotify event as the kernel writes it, with a mount
// record unless id is 0.
func event(mask, id uint64) []byte {
	b, _ := binary.Append(nil, binary.NativeEndian, unix.FanotifyEventMetadata{
		Vers: unix.FANOTIFY_METADATA_VERSION, Metadata_len: unix.FAN_EVENT_METADATA_LEN, Mask: mask, Fd: unix.FAN_NOFD,
	})
	if id != 0 {
		b, _ = binary.Append(b, binary.NativeEndian, fanotifyEventInfoMnt{
			Hdr: fanotifyEventInfoHeader{InfoType: unix.FAN_EVENT_INFO_TYPE_MNT, Len: fanotifyInfoMntSize}, MntID: id,
		})
	}
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	return b
}

func TestParseEvents(t *testing.T) {
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	short := event(unix.FAN_MNT_ATTACH, 7)
	badVersion := event(unix.FAN_MNT_ATTACH, 7)
	badVersion[4] = 2
	badRecord := event(unix.FAN_MNT_DETACH, 9)
	binary.NativeEndian.PutUint16(badRecord[unix.FAN_EVENT_METADATA_LEN+2:], 64)
	for _, tc := range []struct {
		name    string
		in      []byte
		want    []mountEvent
		wantErr bool
	}{
		{"empty", nil, nil, false},
		{"attach", event(unix.FAN_MNT_ATTACH, 42), []mountEvent{{unix.FAN_MNT_ATTACH, 42}}, false},
		{"move and overflow", cat(event(unix.FAN_MNT_ATTACH|unix.FAN_MNT_DETACH, 1<<40), event(unix.FAN_Q_OVERFLOW, 0)),
			[]mountEvent{{unix.FAN_MNT_ATTACH | unix.FAN_MNT_DETACH, 1 << 40}, {unix.FAN_Q_OVERFLOW, 0}}, false},
		{"truncated event", cat(event(unix.FAN_MNT_DETACH, 3), short[:30]), []mountEvent{{unix.FAN_MNT_DETACH, 3}}, true},
		{"metadata version", badVersion, nil, true},
		{"record longer than its event", badRecord, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEvents(tc.in)
			if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseEvents = %v, %v; want %v, error %t", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func FuzzParseEvents(f *testing.F) {
	f.Add(event(unix.FAN_MNT_ATTACH, 42))
	f.Add(append(event(unix.FAN_MNT_DETACH, 1), event(unix.FAN_Q_OVERFLOW, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := parseEvents(b)
		if err == nil && len(b) > 0 && len(evs) == 0 {
			t.Errorf("%d bytes parsed into no event and no error", len(b))
		}
	})
}

// TestApplyDetachesAndLosses: a detach names the launcher the map holds
// for its id and forgets it; an unknown id names nothing; an overflow is
// reported as lost events, never as a guess at launchers.
func TestApplyDetachesAndLosses(t *testing.T) {
	w := &Watcher{launchers: map[uint64]string{1: "a", 2: "b", 3: "a"}}
	c := w.apply([]mountEvent{
		{unix.FAN_MNT_DETACH, 1},
		{unix.FAN_MNT_DETACH, 3},
		{unix.FAN_Q_OVERFLOW, 0},
		{unix.FAN_MNT_DETACH, 99},
	})
	if want := (Change{Launchers: []string{"a"}, Lost: true}); !reflect.DeepEqual(c, want) {
		t.Errorf("change %+v, want %+v", c, want)
	}
	if want := map[uint64]string{2: "b"}; !reflect.DeepEqual(w.launchers, want) {
		t.Errorf("map after the detaches %v, want %v", w.launchers, want)
	}
}
