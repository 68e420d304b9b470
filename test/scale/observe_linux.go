// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/hpmount/hpmount/mountinfo"
)

// observeSamples is how many launchers' observations are timed each way.
const observeSamples = 200

// measureObservation times what the engine reads when one launcher
// changes, both ways, on the loaded node, alternating per launcher: the
// whole mountinfo (the batch read of the mountinfo path, on kernels
// before 6.8) and mountinfo.ReadBeneath of the launcher's hotplug-disks
// (the statmount path). Each pair must agree on the stack on every
// filesystem target, so the faster answer is also the same one.
func (e *env) measureObservation(*agent) error {
	if err := mountinfo.CheckStatmount(); err != nil {
		e.report.explain("observation", "The per-launcher observation rows are missing: this kernel has no statmount(2).")
		fmt.Printf("   per-launcher observation: skipped (%v)\n", err)
		return nil
	}
	var table, beneath []float64
	entries := 0
	for i := range observeSamples + 1 {
		v := e.vms[i%len(e.vms)]
		start := time.Now()
		whole, err := mountinfo.ReadTable("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		tookTable := time.Since(start)
		start = time.Now()
		part, err := mountinfo.ReadBeneath(e.node.HotplugDisksDir(string(v.launcher)))
		if err != nil {
			return err
		}
		tookBeneath := time.Since(start)
		if err := sameStacks(e, v, whole, part); err != nil {
			return err
		}
		if i == 0 {
			continue // warms both up
		}
		table = append(table, float64(tookTable)/1e6)
		beneath = append(beneath, float64(tookBeneath)/1e6)
		entries = whole.Len()
	}
	tableRow := row{what: fmt.Sprintf("per-launcher observation: whole mountinfo read (%d entries), the path before Linux 6.8", entries),
		unit: "ms", runs: table}
	ratio := tableRow.median() / row{runs: beneath}.median()
	e.report.add(tableRow)
	e.report.add(row{what: "per-launcher observation: statmount vs table read (statmount/listmount of one launcher's hotplug-disks)",
		unit: "ms", runs: beneath, target: 1, targetOn: "p99",
		note: fmt.Sprintf("%d launchers, alternating with the table read in the same run; table read ÷ statmount, medians: %.0f×; p99s: %.0f×",
			len(beneath), ratio, tableRow.p99()/row{runs: beneath}.p99())})
	e.report.explain("observation", observationProse)
	return nil
}

// sameStacks checks that part (one launcher's mounts from statmount)
// shows the same mounts on v's filesystem targets as the whole table.
func sameStacks(e *env, v *vm, whole, part *mountinfo.Table) error {
	for _, vol := range v.vols {
		if vol.Block {
			continue
		}
		target := e.target(v, vol)
		var got, want []int
		for _, m := range part.At(target) {
			got = append(got, m.ID)
		}
		for _, m := range whole.At(target) {
			want = append(want, m.ID)
		}
		if !slices.Equal(got, want) || len(want) == 0 {
			return fmt.Errorf("statmount sees mounts %v on %q, the table %v", got, target, want)
		}
	}
	return nil
}

// observationProse explains the observation rows; it holds no figure.
const observationProse = "Per-launcher observation is what the engine reads to learn what is mounted in one launcher's " +
	"`hotplug-disks` when that launcher changes. Before Linux 6.8 it reads the node's whole mountinfo; where the kernel has " +
	"`statmount(2)` and `listmount(2)` it asks for that launcher's entries alone (`mountinfo.ReadBeneath`: a statx per entry " +
	"and a statmount per mount on it), so the cost follows the launcher, not the node. Both are timed in this run on the " +
	"same node, one launcher after another, and each pair is checked to show the same mounts."
