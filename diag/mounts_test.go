// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// sameMounts fails t unless both lists hold the same mounts in the same
// order, comparing every field of mountinfo.Info (findmnt provides them all).
func sameMounts(t *testing.T, fromFindmnt, fromMountinfo []mountinfo.Info) {
	t.Helper()
	if len(fromFindmnt) != len(fromMountinfo) {
		t.Fatalf("findmnt has %d mounts, mountinfo %d", len(fromFindmnt), len(fromMountinfo))
	}
	for k := range fromFindmnt {
		if !reflect.DeepEqual(fromFindmnt[k], fromMountinfo[k]) {
			t.Errorf("mount %d differs:\n findmnt:   %+v\n mountinfo: %+v", k, fromFindmnt[k], fromMountinfo[k])
		}
	}
}

func TestParseFindmntMatchesMountinfo(t *testing.T) {
	js, err := os.ReadFile("testdata/node.findmnt.json")
	if err != nil {
		t.Fatal(err)
	}
	mi, err := os.Open("testdata/node.mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer mi.Close()
	fromFindmnt, err := ParseFindmnt(js)
	if err != nil {
		t.Fatal(err)
	}
	fromMountinfo, err := mountinfo.Parse(mi)
	if err != nil {
		t.Fatal(err)
	}
	sameMounts(t, fromFindmnt, fromMountinfo)

	// The captured node has a stack, a deleted source, a path with a
	// space, and shared, slave-less private and unbindable mounts.
	tb := mountinfo.NewTable(fromFindmnt)
	top, n := tb.Top("/tmp/dg/tree/t c/a.img")
	if top == nil || n != 2 || top.Root != "/disk.img" {
		t.Errorf("stacked target: top %+v depth %d, want 2 mounts of /disk.img", top, n)
	}
	if b, _ := tb.Top("/tmp/dg/tree/t c/b.img"); b == nil || !b.Deleted() {
		t.Errorf("deleted source not seen: %+v", b)
	}
	if ub, _ := tb.Top("/tmp/dg/tree/ub"); ub == nil || ub.Propagation() != "unbindable" {
		t.Errorf("unbindable mount: %+v", ub)
	}
}

func TestParseFindmntLoose(t *testing.T) {
	tests := []struct {
		name, in string
		want     mountinfo.Info
		wantErr  string
	}{
		{
			name: "numbers as strings, null columns",
			in:   `{"filesystems":[{"id":"5","parent":"1","maj:min":"8:1","fsroot":"/","target":"/x","source":null,"fstype":"ext4","propagation":"shared,slave","opt-fields":"shared:3 master:2","vfs-options":"rw","fs-options":null}]}`,
			want: mountinfo.Info{ID: 5, Parent: 1, Major: 8, Minor: 1, Root: "/", MountPoint: "/x", FSType: "ext4", Shared: 3, Master: 2, Options: "rw"},
		},
		{name: "bad maj:min", in: `{"filesystems":[{"id":1,"parent":0,"maj:min":"x"}]}`, wantErr: "maj:min"},
		{name: "bad id", in: `{"filesystems":[{"id":"a","parent":0,"maj:min":"0:1"}]}`, wantErr: "id"},
		{name: "no list", in: `{}`, wantErr: "no \"filesystems\""},
		{name: "not json", in: `mount table`, wantErr: "decode findmnt json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFindmnt([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFindmntArgs(t *testing.T) {
	got := strings.Join(FindmntArgs(isolation.Host{Proc: "/proc", PID: 1}), " ")
	if !strings.Contains(got, "--task 1") || !strings.Contains(got, "--nofsroot") || strings.Contains(got, "--kernel") {
		t.Errorf("args for /proc: %s", got)
	}
	got = strings.Join(FindmntArgs(isolation.Host{Proc: "/host/proc", PID: 1}), " ")
	if !strings.Contains(got, "--tab-file /host/proc/1/mountinfo") {
		t.Errorf("args for /host/proc: %s", got)
	}
}
