package mount

import (
	"fmt"
	"io"
	"os"
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

// Table is one scan of a mount table, indexed for the questions a
// reconcile asks. It is read once per batch and not changed afterwards.
type Table struct {
	skipped Skipped
	mounts  []Info
	byID    map[int]*Info
	byPoint map[string][]*Info
	byDev   map[[2]uint32][]*Info
}

// NewTable indexes mounts.
func NewTable(mounts []Info) *Table {
	t := &Table{
		mounts:  mounts,
		byID:    make(map[int]*Info, len(mounts)),
		byPoint: make(map[string][]*Info, len(mounts)),
		byDev:   make(map[[2]uint32][]*Info),
	}
	// Nearly every mount point, and many devices, have one mount: their
	// one-element lists are cut from one array (capacity 1, so a second
	// mount copies the list out) instead of an allocation each.
	ones := make([]*Info, 2*len(mounts))
	for k := range t.mounts {
		m := &t.mounts[k]
		ones[2*k], ones[2*k+1] = m, m
		t.byID[m.ID] = m
		addTo(t.byPoint, m.MountPoint, ones[2*k:2*k+1:2*k+1])
		addTo(t.byDev, [2]uint32{m.Major, m.Minor}, ones[2*k+1:2*k+2:2*k+2])
	}
	for p, stack := range t.byPoint {
		if len(stack) > 1 {
			t.byPoint[p] = orderStack(stack)
		}
	}
	return t
}

// addTo adds the mount one[0] to the list under key; the first mount under
// a key gets one itself as its list.
func addTo[K comparable](index map[K][]*Info, key K, one []*Info) {
	if list, ok := index[key]; ok {
		index[key] = append(list, one[0])
	} else {
		index[key] = one
	}
}

// orderStack sorts the mounts on one mount point bottom to top: each mount
// stacked on a point has the one below it as its parent.
func orderStack(stack []*Info) []*Info {
	if len(stack) < 2 {
		return stack
	}
	ids := make(map[int]bool, len(stack))
	for _, m := range stack {
		ids[m.ID] = true
	}
	var bottom *Info
	above := make(map[int]*Info, len(stack))
	for _, m := range stack {
		if ids[m.Parent] {
			above[m.Parent] = m
		} else if bottom == nil {
			bottom = m
		}
	}
	if bottom == nil {
		return stack
	}
	ordered := []*Info{bottom}
	for cur := bottom; len(ordered) < len(stack); {
		next, ok := above[cur.ID]
		if !ok {
			break
		}
		ordered = append(ordered, next)
		cur = next
	}
	if len(ordered) != len(stack) {
		// Siblings on one point (not a stack) keep the kernel's order.
		return stack
	}
	return ordered
}

// ReadTable parses the mountinfo file at path, e.g. /proc/1/mountinfo. A
// line it cannot parse is left out and recorded in Skipped, never fatal:
// one odd mount must not stop every decision on the node.
func ReadTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open mount table %q: %w", path, err)
	}
	defer f.Close()
	t, err := readTable(f)
	if err != nil {
		return nil, fmt.Errorf("parse mount table %q: %w", path, err)
	}
	return t, nil
}

// readTable is ReadTable's work on any reader, for BenchmarkMountinfo.
func readTable(r io.Reader) (*Table, error) {
	mounts, skipped, err := ParseLenient(r)
	if err != nil {
		return nil, err
	}
	t := NewTable(mounts)
	t.skipped = skipped
	return t, nil
}

// Skipped says how many lines of the mount table could not be parsed and
// were left out (ReadTable skips them rather than fail), and why the first
// one could not.
func (t *Table) Skipped() Skipped { return t.skipped }

// Len is the number of mounts read.
func (t *Table) Len() int { return len(t.mounts) }

// Mounts returns every mount in kernel order. Callers must not modify it.
func (t *Table) Mounts() []Info { return t.mounts }

// ByID returns the mount with the given id, or nil.
func (t *Table) ByID(id int) *Info { return t.byID[id] }

// At returns the mounts on mountPoint, bottom first; the last one is what a
// lookup of the path reaches. More than one means mounts are stacked.
func (t *Table) At(mountPoint string) []*Info { return t.byPoint[mountPoint] }

// Top returns the mount a lookup of mountPoint reaches and how many mounts
// are stacked there, or nil, 0.
func (t *Table) Top(mountPoint string) (*Info, int) {
	s := t.byPoint[mountPoint]
	if len(s) == 0 {
		return nil, 0
	}
	return s[len(s)-1], len(s)
}

// ByDevice returns every mount of the filesystem on major:minor: its own
// mount, CSI staging and publish mounts, and file binds of its disk.img.
func (t *Table) ByDevice(major, minor uint32) []*Info {
	return t.byDev[[2]uint32{major, minor}]
}

// Containing returns the mount whose mount point is the longest prefix of
// path, i.e. the mount path lives on, ignoring stacking order below the top.
func (t *Table) Containing(path string) *Info {
	for p := path; ; {
		if top, _ := t.Top(p); top != nil {
			return top
		}
		if p == "/" || p == "" {
			return nil
		}
		k := strings.LastIndexByte(p, '/')
		if k <= 0 {
			p = "/"
		} else {
			p = p[:k]
		}
	}
}
