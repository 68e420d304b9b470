// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"fmt"
	"os"
	"strings"
	"testing"

	moby "github.com/moby/sys/mountinfo"
)

// addMountinfoSeeds adds every line of the captured tables, and this
// machine's live one, as one seed each, and each whole table as a seed.
func addMountinfoSeeds(f *testing.F) {
	for _, path := range []string{"testdata/node.mountinfo", "testdata/odd.mountinfo", "/proc/self/mountinfo"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		for _, line := range strings.Split(string(data), "\n") {
			f.Add([]byte(line))
		}
	}
}

// FuzzParseMountinfo feeds arbitrary text to ParseLenient and holds it to
// three rules: it never panics; every non-blank line is either a mount or
// counted as skipped, and Parse fails exactly when a line was skipped; and
// every line it accepts, moby/sys/mountinfo accepts too and reads field by
// field as we do. moby is more lenient (it reads "x" as mount id 0), so a
// line it accepts may still be one we refuse: we never guess. The one
// reading that may differ is an escape above \177, which only we decode;
// the kernel escapes nothing above "\\" (\134), so it never writes one.
func FuzzParseMountinfo(f *testing.F) {
	addMountinfoSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		text := string(data)
		ours, skipped, err := ParseLenient(strings.NewReader(text))
		if err != nil {
			t.Fatalf("ParseLenient of in-memory text: %v", err)
		}
		var lines []string
		for _, l := range strings.Split(text, "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, strings.TrimSuffix(l, "\r"))
			}
		}
		if len(ours)+skipped.Lines != len(lines) {
			t.Fatalf("%d mounts + %d skipped, %d non-blank lines", len(ours), skipped.Lines, len(lines))
		}
		if _, perr := Parse(strings.NewReader(text)); (perr != nil) != (skipped.Lines > 0) {
			t.Fatalf("Parse error %v with %d lines skipped", perr, skipped.Lines)
		}
		for _, line := range lines {
			compareWithMoby(t, line)
		}
	})
}

// compareWithMoby checks one line: if we accept it, moby reads it alike.
func compareWithMoby(t *testing.T, line string) {
	t.Helper()
	got, _, err := ParseLenient(strings.NewReader(line))
	if err != nil || len(got) != 1 {
		return // refused (or blank): nothing to compare
	}
	theirs, err := moby.GetMountsFromReader(strings.NewReader(line), nil)
	if err != nil || len(theirs) != 1 {
		t.Fatalf("we accept %q as %+v; moby: %v (%d mounts)", line, got[0], err, len(theirs))
	}
	want := fromMoby(theirs[0])
	if hasHighEscape(line) {
		got[0].Root, got[0].MountPoint, got[0].FSType, got[0].Source = want.Root, want.MountPoint, want.FSType, want.Source
	}
	if got[0] != want {
		t.Fatalf("line %q:\nours %+v\nmoby %+v", line, got[0], want)
	}
}

// hasHighEscape reports whether s holds an escape \200 to \377.
func hasHighEscape(s string) bool {
	for k := 0; k+3 < len(s); k++ {
		if s[k] == '\\' && isOctalByte(s[k+1:k+4]) && s[k+1] >= '2' {
			return true
		}
	}
	return false
}

// kernelEscape escapes s as show_mountinfo does (seq_escape with " \t\n\\").
func kernelEscape(s string) string {
	var b strings.Builder
	for k := 0; k < len(s); k++ {
		switch c := s[k]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzParseKernelLine writes one mount as the kernel writes it, from fuzzed
// fields (paths and source of any bytes, escaped as the kernel escapes
// them), and requires both ParseLenient and moby to read back exactly those
// fields: what a kernel can print, we read, and read right.
func FuzzParseKernelLine(f *testing.F) {
	f.Add(uint32(461), uint32(453), uint32(8), uint32(16), "/disk.img", "/var/lib/kubelet/pods/x/hotplug-disks/data disk.img", "rw,relatime", uint32(210), uint32(0), "ext4", "/dev/sdb", "rw")
	f.Add(uint32(31), uint32(22), uint32(0), uint32(45), "/", "/run/x", "rw", uint32(9), uint32(3), "tmpfs", "", "rw,size=1024k")
	f.Add(uint32(42), uint32(22), uint32(0), uint32(51), "/a b", "/t/tab\tnew\nback\\", "rw", uint32(0), uint32(0), "fuse.sshfs", "src x\\", "rw")
	f.Fuzz(func(t *testing.T, id, parent, major, minor uint32, root, point, opts string, shared, master uint32, fstype, source, super string) {
		want := Info{ID: int(id >> 1), Parent: int(parent >> 1), Major: major, Minor: minor, Root: root, MountPoint: point,
			Options: opts, Shared: int(shared >> 1), Master: int(master >> 1), FSType: fstype, Source: source, SuperOptions: super}
		// What the kernel never prints: empty paths or type, and options
		// with a separator in them (they are comma lists of names).
		if root == "" || point == "" || fstype == "" || !kernelOptions(opts) || !kernelOptions(super) {
			t.Skip()
		}
		optional := ""
		if want.Shared != 0 {
			optional += fmt.Sprintf(" shared:%d", want.Shared)
		}
		if want.Master != 0 {
			optional += fmt.Sprintf(" master:%d", want.Master)
		}
		line := fmt.Sprintf("%d %d %d:%d %s %s %s%s - %s %s %s", want.ID, want.Parent, major, minor,
			kernelEscape(root), kernelEscape(point), opts, optional, kernelEscape(fstype), kernelEscape(source), super)
		got, err := Parse(strings.NewReader(line + "\n"))
		if err != nil || len(got) != 1 || got[0] != want {
			t.Fatalf("line %q: got %+v, %v\nwant %+v", line, got, err, want)
		}
		compareWithMoby(t, line)
	})
}

// kernelOptions reports whether s could be a mount's option list in
// mountinfo: non-empty, no whitespace or backslash (the kernel escapes
// those in option values), not the separator.
func kernelOptions(s string) bool {
	return s != "" && s != "-" && !strings.ContainsAny(s, " \t\n\r\\")
}
