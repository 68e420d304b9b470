// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Info is one line of /proc/<pid>/mountinfo (see proc(5)).
type Info struct {
	ID, Parent   int
	Major, Minor uint32
	// Root is the path inside the filesystem that is mounted here: "/" for a
	// whole filesystem, "/disk.img" for a file bind of a PVC's image.
	Root       string
	MountPoint string
	Options    string
	// Shared and Master are the peer group ids from the optional fields
	// (shared:N, master:N); 0 when absent.
	Shared, Master int
	Unbindable     bool
	FSType         string
	Source         string
	SuperOptions   string
	// UniqueID and UniqueParent are the kernel's 64-bit mount ids, never
	// reused, which statmount(2) and listmount(2) take; 0 in a table read
	// from mountinfo text, which shows only the reused ids (ID, Parent)
	// that STATX_MNT_ID and every index of Table use.
	UniqueID, UniqueParent uint64
}

// Dev returns the mount's device as "MAJ:MIN", as findmnt prints it.
func (i *Info) Dev() string { return fmt.Sprintf("%d:%d", i.Major, i.Minor) }

// Propagation names the mount's propagation as findmnt does: "shared",
// "private", "slave", "shared,slave" or "unbindable".
func (i *Info) Propagation() string {
	switch {
	case i.Unbindable:
		return "unbindable"
	case i.Shared != 0 && i.Master != 0:
		return "shared,slave"
	case i.Shared != 0:
		return "shared"
	case i.Master != 0:
		return "slave"
	}
	return "private"
}

// Deleted reports whether the mounted root was unlinked after the mount:
// the kernel appends "//deleted" to the root of such a mount.
func (i *Info) Deleted() bool { return strings.HasSuffix(i.Root, "//deleted") }

// Parse reads mountinfo text. Lines are decoded as the kernel escapes them
// (octal \040 for space, \011 tab, \012 newline, \134 backslash). A line
// that is not in the kernel's format is an error; ParseLenient skips it.
//
// The whole table is read into one string and every field is a substring
// of it, so a scan allocates the text, the result and only the fields that
// needed unescaping (BenchmarkMountinfo compares it with moby/sys/mountinfo).
func Parse(r io.Reader) ([]Info, error) {
	mounts, skipped, err := ParseLenient(r)
	if err == nil && skipped.Lines > 0 {
		err = skipped.First
	}
	return mounts, err
}

// Skipped records the lines of a mount table that could not be parsed and
// were left out: how many, and the first one's error (naming its line
// number and text), so that a caller can log it once and count the rest.
// The zero value means every line was parsed.
type Skipped struct {
	Lines int
	First error
}

// ParseLenient reads mountinfo text as Parse does, but skips a line it
// cannot parse instead of failing the whole table: one odd mount on a node
// must not stop every decision about all the others. Only a read error is
// an error.
func ParseLenient(r io.Reader) ([]Info, Skipped, error) {
	var skipped Skipped
	text, err := readText(r)
	if err != nil {
		return nil, skipped, fmt.Errorf("read mountinfo: %w", err)
	}
	out := make([]Info, 0, strings.Count(text, "\n")+1)
	for n := 1; len(text) > 0; n++ {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if strings.TrimSpace(line) == "" {
			continue
		}
		info, err := parseLine(strings.TrimSuffix(line, "\r"))
		if err != nil {
			if skipped.Lines++; skipped.First == nil {
				skipped.First = fmt.Errorf("mountinfo line %d: %w", n, err)
			}
			continue
		}
		out = append(out, info)
	}
	return out, skipped, nil
}

// readText reads all of r into one string. A strings.Builder hands its
// buffer out as the string, where string(io.ReadAll(r)) would copy the
// whole table once more; from a strings.Reader it is a single allocation.
func readText(r io.Reader) (string, error) {
	var b strings.Builder
	if _, err := io.Copy(&b, r); err != nil {
		return "", err
	}
	return b.String(), nil
}

// maxFields bounds the fields of one line: ten fixed ones plus the
// optional propagation fields, of which the kernel writes at most four.
const maxFields = 32

// splitFields splits line at each space into buf, without allocating. The
// kernel separates fields with single spaces and escapes any space inside a
// field, so an empty field is a field: the source of a mount made with an
// empty device name ("- tmpfs  rw") is one.
func splitFields(line string, buf *[maxFields]string) ([]string, bool) {
	f := buf[:0]
	for {
		end := strings.IndexByte(line, ' ')
		if end < 0 {
			end = len(line)
		}
		if len(f) == maxFields {
			return f, false
		}
		f = append(f, line[:end])
		if end == len(line) {
			return f, true
		}
		line = line[end+1:]
	}
}

// parseLine parses one line as show_mountinfo writes it: six fields, the
// optional fields, "-", then the filesystem type, the source and the super
// options. Only the source can be empty (a mount made with an empty device
// name); anything the kernel appends after the super options is ignored, as
// moby/sys/mountinfo ignores it.
func parseLine(line string) (Info, error) {
	var i Info
	var buf [maxFields]string
	f, ok := splitFields(line, &buf)
	if !ok {
		return i, fmt.Errorf("more than %d fields: %q", maxFields, line)
	}
	if len(f) < 10 {
		return i, fmt.Errorf("%d fields, want at least 10: %q", len(f), line)
	}
	sep := separator(f)
	if sep < 0 {
		return i, fmt.Errorf("no optional-fields separator: %q", line)
	}
	if len(f) < sep+4 {
		return i, fmt.Errorf("%d fields after the separator, want 3: %q", len(f)-sep-1, line)
	}
	if len(f) > sep+4 && slices.Contains(f[sep+1:], "-") {
		// Trailing fields and a second "-": whether it or the first is the
		// separator is a guess (moby takes the last one), so refuse.
		return i, fmt.Errorf("ambiguous optional-fields separator: %q", line)
	}
	for k := range sep + 4 {
		if f[k] == "" && k != sep+2 {
			return i, fmt.Errorf("field %d is empty: %q", k+1, line)
		}
	}
	var err error
	if i.ID, err = strconv.Atoi(f[0]); err != nil {
		return i, fmt.Errorf("mount id %q: %w", f[0], err)
	}
	if i.Parent, err = strconv.Atoi(f[1]); err != nil {
		return i, fmt.Errorf("parent id %q: %w", f[1], err)
	}
	if i.Major, i.Minor, err = ParseDev(f[2]); err != nil {
		return i, err
	}
	i.Root, i.MountPoint, i.Options = unescape(f[3]), unescape(f[4]), f[5]
	i.SetOptionalFields(f[6:sep])
	i.FSType, i.Source = unescape(f[sep+1]), unescape(f[sep+2])
	i.SuperOptions = f[sep+3]
	return i, nil
}

// separator returns the index of the lone "-" that ends the optional
// fields, or -1. Searching forward from the seventh field finds it before a
// source spelled "-": no optional field is ever "-".
func separator(f []string) int {
	for k := 6; k < len(f); k++ {
		if f[k] == "-" {
			return k
		}
	}
	return -1
}

// ParseDev parses a device number written "MAJ:MIN", decimal digits only:
// no blank around them, as the kernel and findmnt --json write it.
func ParseDev(s string) (major, minor uint32, err error) {
	maj, min, ok := strings.Cut(s, ":")
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("device %q is not MAJ:MIN", s)
	}
	return uint32(ma), uint32(mi), nil
}

// SetOptionalFields records the propagation tags of mountinfo's optional
// fields (shared:N, master:N, unbindable), as findmnt's OPT-FIELDS also
// lists them.
func (i *Info) SetOptionalFields(fields []string) {
	for _, opt := range fields {
		tag, val, _ := strings.Cut(opt, ":")
		switch tag {
		case "shared":
			i.Shared, _ = strconv.Atoi(val)
		case "master":
			i.Master, _ = strconv.Atoi(val)
		case "unbindable":
			i.Unbindable = true
		}
	}
}

// unescape decodes the kernel's octal escapes (show_mountinfo writes
// space, tab, newline and backslash as \ooo); anything malformed is kept as
// it is rather than guessed at.
func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s)) // decoding only shortens: one allocation
	for k := 0; k < len(s); k++ {
		if s[k] == '\\' && k+3 < len(s) && isOctalByte(s[k+1:k+4]) {
			b.WriteByte((s[k+1]-'0')<<6 | (s[k+2]-'0')<<3 | (s[k+3] - '0'))
			k += 3
			continue
		}
		b.WriteByte(s[k])
	}
	return b.String()
}

// isOctalByte reports whether s is three octal digits of a byte (\000 to
// \377).
func isOctalByte(s string) bool {
	return len(s) == 3 && s[0] >= '0' && s[0] <= '3' &&
		s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7'
}
