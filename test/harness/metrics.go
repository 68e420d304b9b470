// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"fmt"
	"strconv"
	"strings"
)

// Counters reads every sample of the metric name from Prometheus text
// (what Agent.Scrape returns), keyed by its label set as written, e.g.
// `op="attach",result="mounted"`.
func Counters(text, name string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("metric line %q: no value", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[labels] = v
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no samples of %s", name)
	}
	return out, nil
}

// CounterDelta is after minus before for every label set of either.
func CounterDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	for k, v := range before {
		if _, ok := after[k]; !ok {
			d[k] = -v
		}
	}
	return d
}

// Gauge reads the one sample of the unlabelled metric name (a gauge, or a
// histogram's _count or _sum) from Prometheus text.
func Gauge(text, name string) (float64, error) {
	for _, line := range strings.Split(text, "\n") {
		if value, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				return 0, fmt.Errorf("metric line %q: %w", line, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("no sample of %s", name)
}
