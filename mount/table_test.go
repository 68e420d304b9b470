package mount

import (
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

func TestParseRejectsMalformed(t *testing.T) {
	for _, line := range []string{
		"1 2 3",
		"x 1 8:1 / / rw - ext4 /dev/a rw",
		"1 1 8 / / rw - ext4 /dev/a rw",
		"1 1 8:1 / / rw shared:1 ext4 /dev/a rw",
	} {
		if _, err := Parse(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("accepted %q", line)
		}
	}
}
