// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"fmt"
	"io"
	"os"
	"strings"
)

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
