package mount

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

// TestParseLenientOddLines: a mount made with an empty source prints an
// empty field ("- tmpfs  rw"); that is the kernel's format, not an error.
// A line that is really malformed is skipped and counted, never fatal for
// the rest of the table (issue 10: one line stopped the whole node).
func TestParseLenientOddLines(t *testing.T) {
	data, err := os.ReadFile("testdata/odd.mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounts, skipped, err := ParseLenient(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if skipped.Lines != 1 || skipped.First == nil || !strings.Contains(skipped.First.Error(), "line 4") {
		t.Fatalf("skipped = %+v, want line 4 only", skipped)
	}
	if len(mounts) != 4 {
		t.Fatalf("%d mounts, want 4", len(mounts))
	}
	for _, tc := range []struct {
		k                                    int
		mountPoint, source, fstype, superOps string
	}{
		{1, "/run/empty-source", "", "tmpfs", "rw,size=1024k"},
		{2, "/var/lib/kubelet/pods/p1/volumes/kubernetes.io~empty-dir/hotplug-disks/my disk.img", "/dev/loop3", "ext4", "rw"},
		{3, "/var/lib/kubelet/pods/p2/volumes/kubernetes.io~empty-dir/hotplug-disks/d.img", "/dev/sdb", "xfs", "rw,attr2"},
	} {
		m := mounts[tc.k]
		if m.MountPoint != tc.mountPoint || m.Source != tc.source || m.FSType != tc.fstype || m.SuperOptions != tc.superOps {
			t.Errorf("mount %d = %+v, want %+v", tc.k, m, tc)
		}
	}
	if mounts[3].Master != 4 || mounts[1].Shared != 9 {
		t.Errorf("peer groups lost: %+v", mounts)
	}
	if _, err := Parse(strings.NewReader(string(data))); err == nil {
		t.Error("Parse accepted a malformed line")
	}
}
