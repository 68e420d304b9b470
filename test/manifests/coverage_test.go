// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/hpmount/hpmount/metrics"
)

// unwatched are single metric families the agent's registry holds that
// no alert and no dashboard panel reads, each with why. A family neither
// read nor listed here (or in unwatchedPrefixes) fails
// TestEveryMetricWatched: a metric nobody looks at is either missing from
// the dashboard or not worth its series. Every hpmount_ family is read today.
var unwatched = map[string]string{}

// unwatchedPrefixes are whole groups of families left out, with why.
var unwatchedPrefixes = map[string]string{
	"go_memstats_": "Go allocator detail for profiling the agent; the dashboard shows heap in use beside resident memory and the limit",
	"go_gc_":       "Go GC settings and pauses; the dashboard reads go_gc_gomemlimit_bytes, the rest is profiling detail",
	"go_":          "Go runtime identity and scheduler (goroutines, threads, GOMAXPROCS, version): profiling detail, not an operator's signal",
	"process_":     "process accounting every exporter has (CPU, fds, network, start time); memory is read, CPU has no limit to compare with",
	"promhttp_":    "scrapes of /metrics itself; Prometheus's own up and scrape_duration_seconds say more",
}

// runtimeFamilies gathers the families of the agent's registry that
// metrics.Descriptions does not describe (the Go runtime's, the process's,
// promhttp's), by name, with their labels; a summary's quantile label is
// listed, its _sum and _count series are not.
func runtimeFamilies() map[string][]string {
	m := metrics.New("", "")
	m.Handler() // registers promhttp's families, as the agent's server does
	fams, err := m.Registry().Gather()
	if err != nil {
		panic("gather a new registry: " + err.Error())
	}
	described := map[string]bool{}
	for _, d := range metrics.Descriptions() {
		described[d.Name] = true
	}
	out := map[string][]string{}
	for _, f := range fams {
		if described[f.GetName()] {
			continue
		}
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		if f.GetType() == dto.MetricType_SUMMARY {
			labels = append(labels, "quantile")
		}
		out[f.GetName()] = labels
	}
	return out
}

// familyOf is the family a series name belongs to.
func familyOf(series string, families map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(series, suffix); ok && families[f] {
			return f
		}
	}
	return series
}

// TestEveryMetricWatched fails when a metric family the agent registers
// (metrics.Descriptions and every other family of its registry) is read by
// neither an alert nor a dashboard panel and is not listed in unwatched or
// unwatchedPrefixes with a reason.
func TestEveryMetricWatched(t *testing.T) {
	families := map[string]bool{}
	for _, d := range metrics.Descriptions() {
		families[d.Name] = true
	}
	for name := range runtimeFamilies() {
		families[name] = true
	}
	read := map[string]bool{}
	for _, r := range loadRules(t) {
		names, _ := checkExpr(r.Expr)
		for _, n := range names {
			read[familyOf(n, families)] = true
		}
	}
	data, err := os.ReadFile(deployPath(t, "dashboards", "hpmount.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			names, _ := checkExpr(grafanaVars.Replace(q.Expr))
			for _, n := range names {
				read[familyOf(n, families)] = true
			}
		}
	}
	for _, f := range slices.Sorted(maps.Keys(families)) {
		if read[f] || unwatched[f] != "" || prefixReason(f) != "" {
			continue
		}
		t.Errorf("metric family %s is read by no alert (deploy/alerts) and no panel (deploy/dashboards/hpmount.json): add one, or list it in unwatched with why", f)
	}
	for f, why := range unwatched {
		if read[f] {
			t.Errorf("unwatched lists %s (%q), but it is read: drop it from the list", f, why)
		}
	}
}

func prefixReason(family string) string {
	for p, why := range unwatchedPrefixes {
		if strings.HasPrefix(family, p) {
			return why
		}
	}
	return ""
}
