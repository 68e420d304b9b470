// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"time"

	"github.com/hpmount/hpmount/test/harness"
)

// memory is one reading of the agent's memory, taken the same way for
// every node size: the high-water mark of its resident set since it
// started (VmHWM) and its resident set once the node has settled (VmRSS
// after opts.settle with nothing changing, scraped every opts.scrapeEvery
// as Prometheus would), with the Go runtime's view at the last scrape.
type memory struct {
	peak, settled float64 // MiB
	heapInUse     float64 // MiB, go_memstats_heap_inuse_bytes
	// heapUnreturned is heap the runtime holds but does not use and has
	// not released to the kernel (heap idle minus heap released): part of
	// the settled RSS that no live object accounts for.
	heapUnreturned float64 // MiB
	// file is the part of the settled RSS that is pages of the executable
	// (RssFile).
	file    float64 // MiB
	scrapes int
}

// settle waits opts.settle with nothing changing on the node, scraping the
// agent every opts.scrapeEvery, then reads its memory.
func (e *env) settle(a *agent) (memory, error) {
	var m memory
	var last metrics
	for end := time.Now().Add(e.opts.settle); ; {
		time.Sleep(min(e.opts.scrapeEvery, max(time.Until(end), 0)))
		s, err := a.scrape()
		if err != nil {
			return m, err
		}
		last, m.scrapes = s, m.scrapes+1
		if !time.Now().Before(end) {
			break
		}
	}
	p, err := harness.ReadProcStat(a.cmd.Process.Pid)
	if err != nil {
		return m, err
	}
	m.peak, m.settled, m.file = float64(p.Peak)/(1<<20), float64(p.RSS)/(1<<20), float64(p.RSSFile)/(1<<20)
	m.heapInUse = last.sum("go_memstats_heap_inuse_bytes", nil) / (1 << 20)
	m.heapUnreturned = (last.sum("go_memstats_heap_idle_bytes", nil) - last.sum("go_memstats_heap_released_bytes", nil)) / (1 << 20)
	return m, nil
}

// measureMemory settles the node and adds the two memory rows of the
// agent a on the node what names; target applies to the settled value (0:
// none) and is met or missed by the value measured.
func (e *env) measureMemory(a *agent, what string, target float64) error {
	m, err := e.settle(a)
	if err != nil {
		return err
	}
	e.report.add(row{what: fmt.Sprintf("agent RSS, %s: high-water mark (VmHWM) since the agent started", what),
		unit: "MiB", runs: []float64{m.peak}})
	e.report.add(row{what: fmt.Sprintf("agent RSS, %s: settled (VmRSS after %s with nothing changing)", what, e.opts.settle),
		unit: "MiB", runs: []float64{m.settled}, target: target,
		note: fmt.Sprintf("%d scrapes, every %s; at the last, Go heap in use %.0f MiB and heap held but not returned to the kernel %.0f MiB; "+
			"%.0f MiB of the RSS are pages of the executable (RssFile)",
			m.scrapes, e.opts.scrapeEvery, m.heapInUse, m.heapUnreturned, m.file)})
	e.report.explain("memory", memoryProse)
	fmt.Printf("   memory, %s: high-water mark %.0f MiB, settled %.0f MiB (heap in use %.0f MiB, not returned %.0f MiB, executable %.0f MiB)\n",
		what, m.peak, m.settled, m.heapInUse, m.heapUnreturned, m.file)
	return nil
}

// memoryProse explains the memory rows; it holds no figure, so it cannot
// disagree with the run that printed it.
const memoryProse = "Memory is read the same way for every node size, from `/proc/<pid>/status` of the agent: " +
	"the high-water mark is `VmHWM`, the most its resident set reached since it started (on the loaded node, " +
	"an agent started with every volume mounted, through its start, the single attaches, the storm and the idle " +
	"window; on the larger node, through attaching every volume of the VMIs added to it); the settled value is `VmRSS` after the node has had nothing to change " +
	"for the stated time while the agent was scraped as Prometheus would. The note of each settled row splits it " +
	"with the Go runtime's own figures from the last scrape: what live objects use, and what the runtime holds " +
	"and has not yet returned to the kernel."
