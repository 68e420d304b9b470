// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	moby "github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestParseMatchesMoby compares the parser with moby/sys/mountinfo field by
// field, on the captured tables and this machine's live one. moby has no
// notion of a line to skip, so it is given one line at a time: it must
// reject as many lines as ParseLenient skips, and read the others as we do.
func TestParseMatchesMoby(t *testing.T) {
	for _, path := range []string{"testdata/node.mountinfo", "testdata/odd.mountinfo", "/proc/self/mountinfo"} {
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ours, skipped, err := ParseLenient(strings.NewReader(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			var theirs []Info
			rejected := 0
			for _, line := range strings.Split(string(data), "\n") {
				if line == "" {
					continue
				}
				m, err := moby.GetMountsFromReader(strings.NewReader(line), nil)
				if err != nil {
					rejected++
					continue
				}
				theirs = append(theirs, fromMoby(m[0]))
			}
			if skipped.Lines != rejected || len(ours) != len(theirs) {
				t.Fatalf("%d mounts, %d skipped; moby %d, %d rejected", len(ours), skipped.Lines, len(theirs), rejected)
			}
			for k := range theirs {
				if ours[k] != theirs[k] {
					t.Errorf("mount %d differs:\nours %+v\nmoby %+v", k+1, ours[k], theirs[k])
				}
			}
		})
	}
}

// fromMoby is moby's reading of a line, as an Info.
func fromMoby(m *moby.Info) Info {
	i := Info{ID: m.ID, Parent: m.Parent, Major: uint32(m.Major), Minor: uint32(m.Minor),
		Root: m.Root, MountPoint: m.Mountpoint, Options: m.Options,
		FSType: m.FSType, Source: m.Source, SuperOptions: m.VFSOptions}
	// moby joins the optional fields with single spaces: split at those
	// only, as the kernel separates them (strings.Fields would also split
	// at a tab or carriage return inside a field).
	i.SetOptionalFields(strings.Split(m.Optional, " "))
	return i
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
			if _, err := moby.GetMountsFromReader(strings.NewReader(big), nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestReadTableOddMounts makes, in the test's private namespace, the mounts
// of issue 10: a tmpfs with an empty source (`mount -t tmpfs "" /x`), a
// file bind of a disk.img from it, and names with every character the
// kernel escapes. The live table must still read with nothing skipped, and
// each mount be found on its path with its source as given. Before the fix
// ReadTable failed on the first of them.
func TestReadTableOddMounts(t *testing.T) {
	testutil.RequiresRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	for _, tc := range []struct{ name, dir, source string }{
		{"empty source", "empty-source", ""},
		{"empty source, escaped point", "my disk", ""},
		{"escapes", "tab\tnew\nline back\\slash", "src with space\tand\\"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, target := filepath.Join(base, tc.dir), filepath.Join(base, tc.dir+".img")
			must(t, os.Mkdir(dir, 0o755))
			must(t, unix.Mount(tc.source, dir, "tmpfs", 0, "size=1m"))
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			must(t, os.WriteFile(filepath.Join(dir, "disk.img"), nil, 0o644))
			must(t, os.WriteFile(target, nil, 0o644))
			must(t, unix.Mount(filepath.Join(dir, "disk.img"), target, "", unix.MS_BIND, ""))
			t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })

			tbl, err := ReadTable("/proc/self/mountinfo")
			if err != nil {
				t.Fatalf("read table: %v", err)
			}
			if s := tbl.Skipped(); s.Lines != 0 {
				t.Fatalf("skipped %+v", s)
			}
			for path, root := range map[string]string{dir: "/", target: "/disk.img"} {
				top, n := tbl.Top(path)
				if n != 1 || top.Source != tc.source || top.FSType != "tmpfs" || top.Root != root {
					t.Errorf("%d mounts on %q, top %+v; want a tmpfs of root %q, source %q", n, path, top, root, tc.source)
				}
			}
		})
	}
}
