// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hpmount/hpmount/metrics"
)

// TestAlertsKeepTenantNamespace: the PodMonitor honours the agent's labels,
// so an alert on a per-volume series carries the VMI's namespace, the label
// Alertmanager routes tenants by. Without honouring, Prometheus keeps the
// series' namespace as exported_namespace and the alert carries the
// agent's namespace: the test shows both, through scrapeMerge.
func TestAlertsKeepTenantNamespace(t *testing.T) {
	if !podMonitorHonours(t, render(t, monitoringOverlay(t))) {
		t.Fatal("the PodMonitor does not set honorLabels: a per-volume series' namespace becomes exported_namespace")
	}
	target := map[string]string{"namespace": namespace, "pod": "hpmount-x7k2p", "node": "node1",
		"job": namespace + "/hpmount", "instance": "10.52.0.7:9090", "container": "hpmount", "endpoint": "metrics"}
	perVolume := map[string]bool{}
	for _, d := range metrics.Descriptions() {
		if slices.Contains(d.Labels, "vmi") {
			perVolume[d.Name] = true
		}
	}
	checked := 0
	for _, r := range loadRules(t) {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert, err)
		}
		family := ""
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && perVolume[vs.Name] && family == "" {
				family = vs.Name
			}
			return nil
		})
		if family == "" {
			continue
		}
		checked++
		if !keepsLabel(e, "namespace") {
			t.Errorf("%s aggregates the VMI's namespace away: %s", r.Alert, r.Expr)
			continue
		}
		series := map[string]string{"__name__": family, "namespace": "tenant-a", "vmi": "vm1", "volume": "data"}
		for honour, want := range map[bool]string{true: "tenant-a", false: namespace} {
			if got := scrapeMerge(target, series, honour)["namespace"]; got != want {
				t.Errorf("%s, honorLabels %v: the alert's namespace is %q, want %q", r.Alert, honour, got, want)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no alert reads a per-volume series")
	}
}

// podMonitorHonours reports whether the rendered PodMonitor's endpoint
// sets honorLabels.
func podMonitorHonours(t *testing.T, r *rendered) bool {
	t.Helper()
	for _, u := range r.unstructured {
		if u.GetKind() != "PodMonitor" {
			continue
		}
		endpoints, _, _ := unstructured.NestedSlice(u.Object, "spec", "podMetricsEndpoints")
		for _, ep := range endpoints {
			if honour, _ := ep.(map[string]any)["honorLabels"].(bool); honour {
				return true
			}
		}
	}
	return false
}

// scrapeMerge is Prometheus's merge of a target's labels into a scraped
// series (its scrape config's honor_labels): honoured, the series' own
// labels win; otherwise a series label the target also has is kept as
// exported_<name> and the target's value takes its place.
func scrapeMerge(target, series map[string]string, honour bool) map[string]string {
	out := maps.Clone(series)
	for k, v := range target {
		old, clash := out[k]
		switch {
		case !clash:
			out[k] = v
		case !honour:
			out["exported_"+k], out[k] = old, v
		}
	}
	return out
}

// keepsLabel reports whether e's result keeps label l of the series it
// selects: no aggregation groups it away.
func keepsLabel(e parser.Expr, l string) bool {
	keeps := true
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if a, ok := n.(*parser.AggregateExpr); ok && slices.Contains(a.Grouping, l) == a.Without {
			keeps = false
		}
		return nil
	})
	return keeps
}
