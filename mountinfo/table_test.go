// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"os"
	"strings"
	"testing"
)

const launcherDir = "/var/lib/kubelet/pods/9f8e7d6c-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks"

func readTestdata(t *testing.T, name string) *Table {
	t.Helper()
	tbl, err := ReadTable("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestTableQuestions(t *testing.T) {
	tbl := readTestdata(t, "node.mountinfo")
	for _, tc := range []struct {
		name        string
		target      string
		wantID      int
		wantStacked int
		wantRoot    string
		wantDeleted bool
		wantProp    string
	}{
		{"stacked bind, escaped space", launcherDir + "/data disk.img", 461, 2, "/disk.img", false, "shared"},
		{"deleted source", launcherDir + "/old.img", 462, 1, "/disk.img//deleted", true, "slave"},
		{"emptyDir", launcherDir, 453, 1, "/", false, "shared"},
		{"not mounted", launcherDir + "/none.img", 0, 0, "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, n := tbl.Top(tc.target)
			if n != tc.wantStacked {
				t.Fatalf("stacked = %d, want %d", n, tc.wantStacked)
			}
			if top == nil {
				if tc.wantID != 0 {
					t.Fatalf("no mount on %q", tc.target)
				}
				return
			}
			if top.ID != tc.wantID || top.Root != tc.wantRoot || top.Deleted() != tc.wantDeleted || top.Propagation() != tc.wantProp {
				t.Fatalf("got id %d root %q deleted %v prop %s", top.ID, top.Root, top.Deleted(), top.Propagation())
			}
		})
	}
	if got := len(tbl.ByDevice(8, 16)); got != 4 {
		t.Fatalf("ByDevice(8:16) = %d mounts, want 4", got)
	}
	if c := tbl.Containing(launcherDir + "/x/y"); c == nil || c.ID != 453 {
		t.Fatalf("Containing = %+v, want 453", c)
	}
	if p := tbl.ByID(470).Propagation(); p != "unbindable" {
		t.Fatalf("propagation %q", p)
	}
}

// TestParseRejectsMalformed: what is not in the kernel's format is an
// error for Parse (and a skipped line for ParseLenient), never a guess.
func TestParseRejectsMalformed(t *testing.T) {
	for _, tc := range []struct{ name, line string }{
		{"too few fields", "1 2 3"},
		{"mount id", "x 1 8:1 / / rw - ext4 /dev/a rw"},
		{"device", "1 1 8 / / rw - ext4 /dev/a rw"},
		{"no separator", "1 1 8:1 / / rw shared:1 ext4 /dev/a rw"},
		{"cut after the type", "1 1 8:1 / / rw shared:1 - ext4"},
		{"cut after the source", "1 1 8:1 / / rw shared:1 - ext4 /dev/a"},
		{"empty root", "1 1 8:1  / rw - ext4 /dev/a rw"},
		{"empty optional field", "1 1 8:1 / / rw shared:1  - ext4 /dev/a rw"},
		{"empty type", "1 1 8:1 / / rw -  /dev/a rw"},
		{"empty super options", "1 1 8:1 / / rw - ext4 /dev/a "},
		{"blank in the device", "1 1 8:1\v / / rw - ext4 /dev/a rw"},
		{"second separator after trailing fields", "0 0 0:0 0 0 0 - 0  -   0"},
		{"source - and trailing fields", "1 1 8:1 / / rw - tmpfs - rw x y"},
		{"too many fields", "1 1 8:1 / / rw" + strings.Repeat(" shared:1", 30) + " - ext4 /dev/a rw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := Parse(strings.NewReader(tc.line + "\n")); err == nil {
				t.Errorf("accepted %q as %+v", tc.line, m)
			}
		})
	}
}

// TestParseKernelFormat: single lines as show_mountinfo writes them, each
// field where the kernel puts it, escapes decoded.
func TestParseKernelFormat(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       Info
	}{
		{"empty source", "31 22 0:45 / /run/x rw,relatime shared:9 - tmpfs  rw,size=1024k",
			Info{ID: 31, Parent: 22, Minor: 45, Root: "/", MountPoint: "/run/x", Options: "rw,relatime", Shared: 9, FSType: "tmpfs", SuperOptions: "rw,size=1024k"}},
		{"empty source, no optional fields", "31 22 0:45 / /run/x rw - tmpfs  rw",
			Info{ID: 31, Parent: 22, Minor: 45, Root: "/", MountPoint: "/run/x", Options: "rw", FSType: "tmpfs", SuperOptions: "rw"}},
		{"source spelled -", "31 22 0:45 / /run/x rw - tmpfs - rw",
			Info{ID: 31, Parent: 22, Minor: 45, Root: "/", MountPoint: "/run/x", Options: "rw", FSType: "tmpfs", Source: "-", SuperOptions: "rw"}},
		{"shared and slave", "40 22 253:7 /disk.img /t/d.img rw shared:5 master:3 propagate_from:1 - xfs /dev/sdb rw,attr2",
			Info{ID: 40, Parent: 22, Major: 253, Minor: 7, Root: "/disk.img", MountPoint: "/t/d.img", Options: "rw", Shared: 5, Master: 3, FSType: "xfs", Source: "/dev/sdb", SuperOptions: "rw,attr2"}},
		{"unbindable", "41 22 0:50 / /run/p rw unbindable - tmpfs tmpfs rw",
			Info{ID: 41, Parent: 22, Minor: 50, Root: "/", MountPoint: "/run/p", Options: "rw", Unbindable: true, FSType: "tmpfs", Source: "tmpfs", SuperOptions: "rw"}},
		{"escapes", `42 22 0:51 /a\040b /t/tab\011new\012back\134 rw - tmpfs src\040x\134 rw`,
			Info{ID: 42, Parent: 22, Minor: 51, Root: "/a b", MountPoint: "/t/tab\tnew\nback\\", Options: "rw", FSType: "tmpfs", Source: `src x\`, SuperOptions: "rw"}},
		{"malformed escapes kept", `43 22 0:52 / /t/a\0b\400\ rw - tmpfs none rw`,
			Info{ID: 43, Parent: 22, Minor: 52, Root: "/", MountPoint: `/t/a\0b\400\`, Options: "rw", FSType: "tmpfs", Source: "none", SuperOptions: "rw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.line + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseLenientSkipsOnlyTheBadLine reads a captured table (mounts made
// with mount(8) in a private namespace: an empty source, including on the
// file bind of a disk.img, escapes in every field the kernel escapes) with
// one line cut short. That line is skipped and recorded; every other line
// parses with the right fields (issue 10: one line stopped the whole node).
func TestParseLenientSkipsOnlyTheBadLine(t *testing.T) {
	tbl := readTestdata(t, "odd.mountinfo")
	skipped := tbl.Skipped()
	if skipped.Lines != 1 || skipped.First == nil || !strings.Contains(skipped.First.Error(), "mountinfo line 10:") {
		t.Fatalf("skipped = %+v, want line 10 only", skipped)
	}
	if tbl.Len() != 15 {
		t.Fatalf("%d mounts, want 15", tbl.Len())
	}
	const hp = "/var/lib/kubelet/pods/9f8e7d6c-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks/"
	for _, tc := range []struct {
		name string
		want Info
	}{
		{"empty source", Info{ID: 330068, Parent: 330067, Minor: 42, Root: "/",
			MountPoint: "/var/lib/kubelet/pods/0a1b2c3d-hp/volumes/kubernetes.io~csi/pvc-a/mount",
			Options:    "rw,relatime", Shared: 1033, FSType: "tmpfs", SuperOptions: "rw"}},
		{"bind from an empty source, escaped space", Info{ID: 330070, Parent: 330067, Minor: 42, Root: "/disk.img",
			MountPoint: hp + "my disk.img", Options: "rw,relatime", Shared: 1033, FSType: "tmpfs", SuperOptions: "rw"}},
		{"shared slave, escaped source", Info{ID: 330071, Parent: 330067, Minor: 43, Root: "/disk.img",
			MountPoint: hp + "b.img", Options: "rw,relatime", Shared: 1035, Master: 1034, FSType: "tmpfs",
			Source: "src with space", SuperOptions: "rw"}},
		{"tab", Info{ID: 330073, Parent: 330067, Minor: 44, Root: "/", MountPoint: "/var/lib/kubelet/odd/tab\tdir",
			Options: "rw,relatime", Shared: 1036, FSType: "tmpfs", Source: "tab\tsrc", SuperOptions: "rw"}},
		{"newline", Info{ID: 278088, Parent: 330067, Minor: 45, Root: "/", MountPoint: "/var/lib/kubelet/odd/new\nline",
			Options: "rw,relatime", Shared: 1037, FSType: "tmpfs", Source: "none", SuperOptions: "rw"}},
		{"backslash", Info{ID: 278089, Parent: 330067, Minor: 46, Root: "/", MountPoint: `/var/lib/kubelet/odd/back\slash`,
			Options: "rw,relatime", Shared: 1038, FSType: "tmpfs", Source: `back\src`, SuperOptions: "rw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tbl.ByID(tc.want.ID)
			if got == nil || *got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if top, n := tbl.Top(tc.want.MountPoint); top != got || n != 1 {
				t.Fatalf("Top = %+v, %d", top, n)
			}
		})
	}
	if old, _ := tbl.Top(hp + "old.img"); old == nil || !old.Deleted() || old.Source != "" {
		t.Errorf("deleted bind from an empty source: %+v", old)
	}
	if n := len(tbl.ByDevice(0, 42)); n != 3 {
		t.Errorf("ByDevice(0:42) = %d mounts, want the empty-source tmpfs and its 2 binds", n)
	}
	data, err := os.ReadFile("testdata/odd.mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(strings.NewReader(string(data))); err == nil || err.Error() != skipped.First.Error() {
		t.Errorf("Parse = %v, want the skipped line's error", err)
	}
}
