// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/kubevirt"
)

// Output formats of Render.
const (
	FormatTable = "table"
	FormatWide  = "wide"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// TableWidth is the most columns the table format uses.
const TableWidth = 120

// Render writes r to w as format: "table" (fits TableWidth columns, hints
// below), "wide" (more columns, not width-limited), "json" or "yaml" (the
// schema in doc.go).
func Render(w io.Writer, r *Report, format string) error {
	switch format {
	case FormatJSON:
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case FormatYAML:
		b, err := yaml.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		_, err = w.Write(b)
		return err
	case FormatTable, "":
		return renderTable(w, r, false)
	case FormatWide:
		return renderTable(w, r, true)
	}
	return fmt.Errorf("output format %q: want %s, %s, %s or %s", format, FormatTable, FormatWide, FormatJSON, FormatYAML)
}

// column is one table column; max caps its width (0: no cap) and flex
// marks the column that absorbs what is left of TableWidth.
type column struct {
	head string
	max  int
	flex bool
}

func volumeColumns(wide bool) []column {
	cols := []column{
		{head: "NAMESPACE/VMI", max: 24}, {head: "VOLUME", max: 16}, {head: "MODE", max: 5},
		{head: "PHASE", max: 16}, {head: "VERDICT", max: 18}, {head: "SOURCE[FSROOT]", flex: !wide}, {head: "SIZE", max: 7},
	}
	if wide {
		cols = append(cols, []column{{head: "TARGET"}, {head: "MAJ:MIN"}, {head: "PROPAGATION"}, {head: "STACKED"},
			{head: "ATTACH-POD"}, {head: "DEVICE"}, {head: "FS"}, {head: "IMG"}, {head: "LAST-ATTACH"}, {head: "HINT"}}...)
	}
	return cols
}

func volumeRow(v *Volume, wide bool) []string {
	mode := "fs"
	if k, ok := hotplug.KindOf(kubevirt.VolumeMode(v.Mode)); ok {
		mode = k.Short
	}
	src := v.Mount.SourceWithRoot()
	if v.Device != nil && v.Device.Node != "" {
		src = "node " + v.Device.Node
		if v.Device.Published != "" {
			src += ", published " + v.Device.Published
		}
	}
	if src == "" {
		src = "-"
	}
	row := []string{v.Namespace + "/" + v.VMI, v.Volume, mode, dash(v.Phase), string(v.Verdict), src, human(v.Sizes.PVCCapacity)}
	if !wide {
		return row
	}
	var majmin, prop, stacked, attach string
	if v.Mount != nil {
		majmin, prop, stacked = v.Mount.MajMin, v.Mount.Propagation, fmt.Sprint(v.Mount.Stacked)
	} else if v.Device != nil {
		majmin = v.Device.Node
	}
	if v.AttachmentPod != nil {
		attach = v.AttachmentPod.Name
		if v.AttachmentPod.Publishes != nil && !*v.AttachmentPod.Publishes {
			attach += " (unpublished)"
		}
	}
	return append(row, dash(v.Target), dash(majmin), dash(prop), dash(stacked), dash(attach),
		human(v.Sizes.BlockDevice), human(v.Sizes.Filesystem), human(v.Sizes.DiskImage), dash(v.LastAttach.String()), dash(v.Hint))
}

func renderTable(w io.Writer, r *Report, wide bool) error {
	var b strings.Builder
	writeLine(&b, fmt.Sprintf("NODE %s  (mount table: %s; pods dir %s: %s)", r.Node, r.MountSource, r.Propagation.Path, propagationWord(r.Propagation)), wide)
	cols := volumeColumns(wide)
	rows := make([][]string, 0, len(r.Volumes))
	for i := range r.Volumes {
		rows = append(rows, volumeRow(&r.Volumes[i], wide))
	}
	if len(rows) == 0 {
		b.WriteString("No hotplug volumes.\n")
	} else {
		writeGrid(&b, cols, rows, wide)
	}
	if len(r.Orphans) > 0 {
		b.WriteString("\nORPHANS\n")
		ocols := []column{{head: "LAUNCHER", max: 40}, {head: "NAME", max: 20}, {head: "KIND", max: 10}, {head: "VERDICT", max: 20}, {head: "SOURCE[FSROOT]", flex: !wide}}
		var orows [][]string
		for _, o := range r.Orphans {
			who := o.LauncherPod
			if who == "" {
				who = "pod " + o.LauncherPodUID
			}
			src := o.Mount.SourceWithRoot()
			if src == "" {
				src = "node " + o.Device
			}
			orows = append(orows, []string{who, o.Name, o.Kind, string(o.Verdict), src})
		}
		writeGrid(&b, ocols, orows, wide)
	}
	writeMigrations(&b, r, wide)
	writeStorage(&b, r, wide)
	writeHints(&b, r, wide)
	for _, s := range r.Warnings {
		writeLine(&b, "warning: "+s, wide)
	}
	fmt.Fprintf(&b, "%d problem(s)\n", r.Problems)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMigrations says, once per VMI, this node's side of its live
// migration.
func writeMigrations(b *strings.Builder, r *Report, wide bool) {
	seen := map[string]bool{}
	for _, v := range r.Volumes {
		key := v.Namespace + "/" + v.VMI
		if v.Migration == "" || seen[key] {
			continue
		}
		seen[key] = true
		writeLine(b, "migration "+key+": "+v.Migration, wide)
	}
}

func propagationWord(p PropagationCheck) string {
	if p.Shared {
		return "shared"
	}
	if p.Mode != "" {
		return p.Mode + ", NOT SHARED"
	}
	return "NOT SHARED"
}

// writeHints lists the hint of every problem under the table. In table mode
// each hint line is kept within TableWidth by wrapping.
func writeHints(b *strings.Builder, r *Report, wide bool) {
	var lines []string
	for _, v := range r.Volumes {
		if v.Verdict != OK {
			lines = append(lines, fmt.Sprintf("%s/%s %s (%s): %s", v.Namespace, v.VMI, v.Volume, v.Verdict, v.Hint))
		}
	}
	for _, o := range r.Orphans {
		lines = append(lines, fmt.Sprintf("%s (%s): %s", o.Target, o.Verdict, o.Hint))
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\nHINTS\n")
	for _, l := range lines {
		writeLine(b, "  "+l, wide)
	}
}

// writeLine writes s, wrapped to TableWidth unless wide.
func writeLine(b *strings.Builder, s string, wide bool) {
	if wide {
		b.WriteString(s + "\n")
		return
	}
	for _, part := range wrap(s, TableWidth) {
		b.WriteString(part + "\n")
	}
}

func writeGrid(b *strings.Builder, cols []column, rows [][]string, wide bool) {
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = utf8.RuneCountInString(c.head)
		for _, r := range rows {
			widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
		}
		if c.max > 0 && !wide {
			widths[i] = min(widths[i], max(c.max, utf8.RuneCountInString(c.head)))
		}
	}
	if !wide {
		fitFlex(cols, widths)
	}
	line := func(cells []string) {
		parts := make([]string, len(cells))
		for i, s := range cells {
			s = truncate(s, widths[i])
			if i < len(cells)-1 {
				s += strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s))
			}
			parts[i] = s
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
	}
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	line(heads)
	for _, r := range rows {
		line(r)
	}
}

// fitFlex shrinks the flex column so that the row fits TableWidth.
func fitFlex(cols []column, widths []int) {
	total := 2 * (len(cols) - 1)
	flex := -1
	for i, c := range cols {
		total += widths[i]
		if c.flex {
			flex = i
		}
	}
	if flex < 0 || total <= TableWidth {
		return
	}
	widths[flex] = max(widths[flex]-(total-TableWidth), utf8.RuneCountInString(cols[flex].head))
}

// truncate shortens s to n runes, keeping its head and tail around "…":
// for a SOURCE[FSROOT] both the device and the root matter.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 1 {
		return string(r[:n])
	}
	head := (n - 1) / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

func wrap(s string, n int) []string {
	var out []string
	for utf8.RuneCountInString(s) > n {
		r := []rune(s)
		cut := n
		for k := n; k > n/2; k-- {
			if r[k] == ' ' {
				cut = k
				break
			}
		}
		out = append(out, string(r[:cut]))
		s = "    " + strings.TrimLeft(string(r[cut:]), " ")
	}
	return append(out, s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// human prints a byte count with binary units, "-" for 0 (unknown).
func human(n int64) string {
	if n <= 0 {
		return "-"
	}
	const unit = 1024
	units := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi"}
	f := float64(n)
	k := 0
	for f >= unit && k < len(units)-1 {
		f /= unit
		k++
	}
	if k == 0 {
		return fmt.Sprintf("%dB", n)
	}
	if f >= 100 || f == float64(int64(f)) {
		return fmt.Sprintf("%.0f%s", f, units[k])
	}
	return fmt.Sprintf("%.1f%s", f, units[k])
}
