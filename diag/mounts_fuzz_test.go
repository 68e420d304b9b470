// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/mountinfo"
)

// findmntJSON writes infos as findmnt --json --list with FindmntColumns
// prints them (numbers as JSON numbers, as util-linux 2.37 and later do).
func findmntJSON(t *testing.T, infos []mountinfo.Info) []byte {
	t.Helper()
	type entry map[string]any
	list := []entry{}
	for _, i := range infos {
		var opt []string
		if i.Shared != 0 {
			opt = append(opt, "shared:"+strconv.Itoa(i.Shared))
		}
		if i.Master != 0 {
			opt = append(opt, "master:"+strconv.Itoa(i.Master))
		}
		if i.Unbindable {
			opt = append(opt, "unbindable")
		}
		list = append(list, entry{"id": i.ID, "parent": i.Parent, "maj:min": i.Dev(), "fsroot": i.Root,
			"target": i.MountPoint, "source": i.Source, "fstype": i.FSType, "propagation": i.Propagation(),
			"opt-fields": strings.Join(opt, " "), "vfs-options": i.Options, "fs-options": i.SuperOptions})
	}
	out, err := json.Marshal(map[string]any{"filesystems": list})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzParseFindmnt feeds arbitrary bytes to ParseFindmnt, seeded with the
// captured findmnt output of a node and each of its filesystems alone. It
// never panics; what it accepts has one mount per listed filesystem; and
// written back as findmnt would print it, reads back the same: nothing it
// returns depends on a quirk of the input's spelling it did not check.
func FuzzParseFindmnt(f *testing.F) {
	data, err := os.ReadFile("testdata/node.findmnt.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	var doc struct {
		Filesystems []json.RawMessage `json:"filesystems"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		f.Fatal(err)
	}
	for _, fs := range doc.Filesystems {
		f.Add([]byte(`{"filesystems":[` + string(fs) + `]}`))
	}
	f.Add([]byte(`{"filesystems":[{"id":"5","parent":"1","maj:min":"8:1","fsroot":"/","target":"/x","source":null,"fstype":"ext4","propagation":"unbindable","opt-fields":null,"vfs-options":"rw","fs-options":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseFindmnt(data)
		if err != nil {
			return
		}
		var listed struct {
			Filesystems []json.RawMessage `json:"filesystems"`
		}
		if err := json.Unmarshal(data, &listed); err != nil {
			t.Fatalf("ParseFindmnt accepted what encoding/json refuses: %v", err)
		}
		if len(got) != len(listed.Filesystems) {
			t.Fatalf("%d mounts from %d filesystems", len(got), len(listed.Filesystems))
		}
		again, err := ParseFindmnt(findmntJSON(t, got))
		if err != nil {
			t.Fatalf("re-read of %+v: %v", got, err)
		}
		if len(got) == 0 {
			return
		}
		if !reflect.DeepEqual(again, got) {
			t.Fatalf("re-read differs:\nfirst  %+v\nsecond %+v", got, again)
		}
	})
}
