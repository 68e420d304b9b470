package mount

import (
	"os"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
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

// TestParseLenientMatchesMoby: the lines moby/sys/mountinfo reads, field by
// field, on a table with an empty source and escapes (its parser has no
// notion of a line to skip, so the malformed one is left out for it).
func TestParseLenientMatchesMoby(t *testing.T) {
	data, err := os.ReadFile("testdata/odd.mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var good []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(l, "this line") {
			good = append(good, l)
		}
	}
	text := strings.Join(good, "\n") + "\n"
	ours, _, err := ParseLenient(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := mountinfo.GetMountsFromReader(strings.NewReader(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ours) != len(theirs) {
		t.Fatalf("%d mounts, moby %d", len(ours), len(theirs))
	}
	for k, m := range theirs {
		o := ours[k]
		if o.ID != m.ID || o.MountPoint != m.Mountpoint || o.FSType != m.FSType || o.Source != m.Source || o.SuperOptions != m.VFSOptions {
			t.Errorf("line %d differs:\nours %+v\nmoby %+v", k+1, o, m)
		}
	}
}

// TestReadTableWithAnEmptySource mounts a tmpfs with an empty source in the
// test's private namespace, as `mount -t tmpfs "" /x` does on a node: the
// host's table must still read, with that mount in it.
func TestReadTableWithAnEmptySource(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	tbl, err := ReadTable("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read table: %v", err)
	}
	top, _ := tbl.Top(dir)
	if top == nil || top.Source != "" || top.FSType != "tmpfs" {
		t.Fatalf("mount on %q = %+v, want a tmpfs with an empty source", dir, top)
	}
	if s := tbl.Skipped(); s.Lines != 0 {
		t.Fatalf("skipped %+v", s)
	}
}
