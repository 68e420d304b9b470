package mount

import (
	"os"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
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

// TestParseMatchesMoby checks the parser against moby/sys/mountinfo on the
// captured node table and on this machine's live one.
func TestParseMatchesMoby(t *testing.T) {
	for _, path := range []string{"testdata/node.mountinfo", "/proc/self/mountinfo"} {
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := Parse(strings.NewReader(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := mountinfo.GetMountsFromReader(strings.NewReader(string(data)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(ours) != len(theirs) {
				t.Fatalf("%d mounts, moby %d", len(ours), len(theirs))
			}
			for k, m := range theirs {
				o := ours[k]
				if o.ID != m.ID || o.Parent != m.Parent || int(o.Major) != m.Major || int(o.Minor) != m.Minor ||
					o.Root != m.Root || o.MountPoint != m.Mountpoint || o.FSType != m.FSType || o.Source != m.Source ||
					o.Options != m.Options || o.SuperOptions != m.VFSOptions {
					t.Fatalf("line %d differs:\nours %+v\nmoby %+v", k+1, o, m)
				}
			}
		})
	}
}

// BenchmarkParse compares one scan with moby/sys/mountinfo's on the same
// input in the same process; the ratio is what matters.
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/node.mountinfo")
	if err != nil {
		b.Fatal(err)
	}
	big := strings.Repeat(string(data), 200) // ~2,200 mounts, a busy node
	b.Run("hpmount", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(strings.NewReader(big)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("moby", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mountinfo.GetMountsFromReader(strings.NewReader(big), nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
