// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/mountinfo"
)

func title(s string) {
	fmt.Printf("%s\n%s\n", s, strings.Repeat("=", len(s)))
}

func section(s string) { fmt.Printf("\n%s\n", s) }

func item(format string, a ...any) { fmt.Printf("  %s\n", fmt.Sprintf(format, a...)) }

func ok(format string, a ...any) { fmt.Printf("  [ok] %s\n", fmt.Sprintf(format, a...)) }

func sub(s string) { fmt.Printf("  -- %s\n", s) }

// block prints text indented, one line per line, skipping empty ones.
func block(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.TrimSpace(line) != "" {
			fmt.Printf("     %s\n", line)
		}
	}
}

func heading(n, total int, name, notice string) {
	s := fmt.Sprintf("Step %d/%d: %s", n, total, name)
	fmt.Printf("\n%s\n%s\n", s, strings.Repeat("-", len(s)))
	fmt.Printf("  Notice: %s\n", notice)
}

// short replaces the hotplug-disks path by $HP and the kubelet root by
// $KUBELET.
func (d *demo) short(s string) string {
	if d.vm != nil {
		s = strings.ReplaceAll(s, d.node.HotplugDisksDir(string(d.vm.Launcher.UID)), "$HP")
	}
	if d.node != nil {
		s = strings.ReplaceAll(s, d.node.KubeletRoot, "$KUBELET")
	}
	return s
}

// show prints the state after a step: the launcher's view, the VM's (its
// QEMU's query-block), hpmount diag, the agent's metrics and the VMI's new
// Events.
func (d *demo) show() error {
	if err := d.showLauncher(); err != nil {
		return err
	}
	if err := d.showQEMU(); err != nil {
		return err
	}
	if err := d.showDiag(); err != nil {
		return err
	}
	if err := d.showMetrics(); err != nil {
		return err
	}
	return d.showEvents()
}

// showLauncher lists hotplug-disks and its mounts from inside the
// launcher's mount namespace, and the block devices its cgroup allows.
func (d *demo) showLauncher() error {
	l := d.vm.L
	hp := d.node.HotplugDisksDir(string(d.vm.Launcher.UID))
	out, err := l.Exec(fmt.Sprintf("ls -ln %s && echo ---- && cat /proc/self/mountinfo", hp))
	if err != nil {
		return fmt.Errorf("look into the launcher: %w: %s", err, out)
	}
	ls, mi, _ := strings.Cut(out, "----\n")
	sub("launcher view (inside its mount namespace): ls -ln $HP")
	block(d.short(ls))
	mounts, _, err := mountinfo.ParseLenient(strings.NewReader(mi))
	if err != nil {
		return fmt.Errorf("parse the launcher's mountinfo: %w", err)
	}
	var rows []string
	for _, m := range mounts {
		if filepath.Dir(m.MountPoint) != hp {
			continue
		}
		rows = append(rows, fmt.Sprintf("%-18s %-22s %-5s %-7s %-6s %s", d.short(m.MountPoint),
			m.Source+"["+m.Root+"]", m.FSType, m.Dev(), strconv.Itoa(m.ID), m.Propagation()))
	}
	sub("launcher mounts below $HP (its /proc/self/mountinfo; IDs are its namespace's own)")
	if len(rows) == 0 {
		block("(none)")
	} else {
		block(fmt.Sprintf("%-18s %-22s %-5s %-7s %-6s %s", "TARGET", "SOURCE[FSROOT]", "FS", "MAJ:MIN", "ID", "PROPAGATION"))
		block(strings.Join(rows, "\n"))
	}
	rules, err := os.ReadFile(filepath.Join(l.Cgroup, "devices.list"))
	if err != nil {
		return fmt.Errorf("read the launcher's device cgroup: %w", err)
	}
	var blockRules []string
	for _, r := range strings.Split(string(rules), "\n") {
		if strings.HasPrefix(r, "b ") {
			blockRules = append(blockRules, r)
		}
	}
	if len(blockRules) == 0 {
		blockRules = []string{"(none)"}
	}
	sub("block devices the launcher's device cgroup allows: " + strings.Join(blockRules, ", "))
	return nil
}

// diagArgs is `hpmount diag` with args and the flags that point it at the
// demo's node, as an operator's would at theirs.
func (d *demo) diagArgs(args ...string) []string {
	return append(append([]string{"diag"}, args...),
		"--node-name", nodeName,
		"--kubelet-root", d.node.KubeletRoot,
		"--host-pid", strconv.Itoa(os.Getpid()),
		"--cgroup-root", d.node.CgroupRoot,
		"--cgroup-mode", "v1",
		"--kubeconfig", d.adminKC)
}

// showDiag runs `hpmount diag` as an operator would on the node.
func (d *demo) showDiag() error {
	args := d.diagArgs("-o", "table", "--all")
	out, err := exec.CommandContext(d.ctx, d.binary, args...).CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return fmt.Errorf("run hpmount diag: %w", err)
	}
	sub(fmt.Sprintf("hpmount diag -o table --all ... (exit status %d)", code))
	block(d.short(string(out)))
	if code != diag.ExitOK {
		return fmt.Errorf("hpmount diag exited %d, want %d (healthy)", code, diag.ExitOK)
	}
	return nil
}

// shownMetrics are the series a step shows; zero samples are left out.
var shownMetrics = []string{
	"hpmount_volumes",
	"hpmount_mount_operations_total",
	"hpmount_volume_device_size_bytes",
	"hpmount_volume_filesystem_size_bytes",
	"hpmount_volume_disk_image_size_bytes",
	"hpmount_filesystem_expansions_total",
}

// metricLines returns the non-zero samples of the shown metrics.
func metricLines(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		found := false
		for _, m := range shownMetrics {
			found = found || name == m
		}
		if !found || strings.HasSuffix(line, " 0") {
			continue
		}
		if strings.HasSuffix(name, "_bytes") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
					line = fmt.Sprintf("%s  (%s)", line, mib(v))
				}
			}
		}
		out = append(out, line)
	}
	return out
}

func mib(v float64) string {
	if v >= 1<<20 && math.Mod(v, 1<<20) == 0 {
		return fmt.Sprintf("%.0f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%.1f MiB", v/(1<<20))
}

func (d *demo) showMetrics() error {
	text, err := d.agent.Scrape()
	if err != nil {
		return fmt.Errorf("scrape the agent: %w", err)
	}
	lines := metricLines(text)
	sub(fmt.Sprintf("metrics (http://%s/metrics, non-zero samples of hpmount_volumes, _mount_operations_total, _volume_*_size_bytes, _filesystem_expansions_total)", d.agent.MetricsAddr))
	if len(lines) == 0 {
		lines = []string{"(none)"}
	}
	block(strings.Join(lines, "\n"))
	return nil
}

// vmiEvents lists the Events about the VMI, oldest first.
func (d *demo) vmiEvents() ([]corev1.Event, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", vmName),
		fields.OneTermEqualSelector("involvedObject.kind", "VirtualMachineInstance")).String()
	list, err := d.kube.CoreV1().Events(vmNamespace).List(d.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	evs := list.Items
	sort.SliceStable(evs, func(i, j int) bool { return eventTime(evs[i]).Time.Before(eventTime(evs[j]).Time) })
	return evs, nil
}

func eventTime(e corev1.Event) metav1.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp
	}
	if !e.EventTime.IsZero() {
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}

// showEvents prints the VMI's Events that are new since the last call.
func (d *demo) showEvents() error {
	evs, err := d.vmiEvents()
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range evs {
		if c, seen := d.seenEvents[e.Name]; seen && c == e.Count {
			continue
		}
		d.seenEvents[e.Name] = e.Count
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		lines = append(lines, fmt.Sprintf("%-7s %-19s %s%s", e.Type, e.Reason, e.Message, count))
	}
	sub(fmt.Sprintf("new Events of VMI %s/%s", vmNamespace, vmName))
	if len(lines) == 0 {
		lines = []string{"(none)"}
	}
	block(strings.Join(lines, "\n"))
	return nil
}

// waitEvent waits for an Event of the VMI with reason whose message
// contains substr.
func (d *demo) waitEvent(reason, substr string) error {
	return d.eventually("event "+reason+" about "+substr, waitTimeout, func() error {
		evs, err := d.vmiEvents()
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Reason == reason && strings.Contains(e.Message, substr) {
				return nil
			}
		}
		return errors.New("no such event yet")
	})
}

func countReason(evs []corev1.Event, reason string) int {
	n := 0
	for _, e := range evs {
		if e.Reason == reason {
			n += int(max(e.Count, 1))
		}
	}
	return n
}
