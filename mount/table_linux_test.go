package mount

import (
	"os"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
)

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
