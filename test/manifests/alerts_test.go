// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/metrics"
	"github.com/hpmount/hpmount/outcome"
)

// externalMetrics are the only series the alerts and the dashboard may name
// that hpmount does not export, with who does.
var externalMetrics = map[string]string{
	"kube_pod_info":                   "kube-state-metrics",
	"kube_pod_status_phase":           "kube-state-metrics",
	"kube_pod_container_status_ready": "kube-state-metrics",
}

// scrapeLabels are added to every series by the PodMonitor (node, by its
// relabeling) or by Prometheus itself.
var scrapeLabels = []string{"node", "job", "instance", "pod", "namespace", "exported_namespace"}

// prometheusRule is the part of monitoring.coreos.com/v1 PrometheusRule the
// component uses, decoded strictly so that a misspelt field fails.
type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// vocabulary is, per metric and label, every value the agent can report:
// a matcher on any other value selects nothing, forever.
func vocabulary() map[string]map[string][]string {
	str := func(s ...string) []string { return s }
	var ops, results []string
	for _, o := range outcome.Ops {
		ops = append(ops, string(o))
	}
	for _, r := range outcome.Results {
		results = append(results, string(r))
	}
	return map[string]map[string][]string{
		"hpmount_volumes": {
			"state": str(agent.StateMounted, agent.StatePending, agent.StateRefused, agent.StateFailed, agent.StateUnmounted, agent.StateNotPropagated),
			"mode":  str(metrics.ModeFilesystem, metrics.ModeBlock, metrics.ModeDirectory, metrics.ModeUnknown),
		},
		"hpmount_mount_operations_total":      {"op": ops, "result": results},
		"hpmount_filesystem_expansions_total": {"result": str(agent.ExpansionGrown, agent.ExpansionUnchanged, agent.ExpansionFailed, agent.ExpansionShrinkIgnored)},
		"hpmount_refusals_total":              {"reason": kubevirt.RefusalReasons},
	}
}

// exported maps every series name hpmount exposes (histograms with their
// _bucket, _sum and _count) to its labels.
func exported() map[string][]string {
	out := map[string][]string{}
	for name, labels := range runtimeFamilies() {
		out[name] = labels
		out[name+"_sum"], out[name+"_count"] = labels, labels // a summary's; harmless otherwise
	}
	for _, d := range metrics.Descriptions() {
		if d.Type != metrics.TypeHistogram {
			out[d.Name] = d.Labels
			continue
		}
		out[d.Name+"_bucket"] = append(slices.Clone(d.Labels), "le")
		out[d.Name+"_sum"], out[d.Name+"_count"] = d.Labels, d.Labels
	}
	return out
}

// checkExpr parses a PromQL expression with Prometheus's own parser and
// returns the metric names it reads and its problems: a series hpmount does
// not export, a label it does not carry, a label value it never reports.
func checkExpr(expr string) (names, problems []string) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("%q is not valid PromQL: %v", expr, err)}
	}
	series, vocab := exported(), vocabulary()
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		names = append(names, vs.Name)
		known, ours := series[vs.Name]
		if _, ext := externalMetrics[vs.Name]; !ours && !ext {
			problems = append(problems, fmt.Sprintf("names %q, which is neither in metrics/ nor an allowed external metric", vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if ours {
				problems = append(problems, matcherProblems(vs.Name, m, append(known, scrapeLabels...), vocab[vs.Name][m.Name])...)
			}
		}
		return nil
	})
	return names, problems
}

func matcherProblems(metric string, m *labels.Matcher, known, values []string) []string {
	if m.Name == labels.MetricName {
		return nil
	}
	if !slices.Contains(known, m.Name) {
		return []string{fmt.Sprintf("%s has no label %q (it has %v)", metric, m.Name, known)}
	}
	if values == nil || (m.Type != labels.MatchEqual && m.Type != labels.MatchRegexp) {
		return nil
	}
	var out []string
	for _, v := range strings.Split(m.Value, "|") {
		if !slices.Contains(values, v) {
			out = append(out, fmt.Sprintf("%s{%s=%q}: %q is never reported (values: %v)", metric, m.Name, m.Value, v, values))
		}
	}
	return out
}

// checkQuery reports checkExpr's problems as errors of t.
func checkQuery(t *testing.T, where, expr string) []string {
	t.Helper()
	names, problems := checkExpr(expr)
	for _, p := range problems {
		t.Errorf("%s: %s", where, p)
	}
	return names
}

func alertsOverlay(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, deployPath(t))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents: [%q, %q]\n",
		base, filepath.Join(base, "monitoring"), filepath.Join(base, "alerts"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadRules(t *testing.T) []alertRule {
	t.Helper()
	r := render(t, alertsOverlay(t))
	var rules []alertRule
	for _, u := range r.unstructured {
		if u.GetKind() != "PrometheusRule" {
			continue
		}
		data, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		var pr prometheusRule
		if err := yaml.UnmarshalStrict(data, &pr); err != nil {
			t.Fatalf("PrometheusRule %q: %v", u.GetName(), err)
		}
		if pr.APIVersion != podMonitorGroupVersion || u.GetNamespace() != namespace {
			t.Errorf("PrometheusRule %s in %q", pr.APIVersion, u.GetNamespace())
		}
		for _, g := range pr.Spec.Groups {
			rules = append(rules, g.Rules...)
		}
	}
	if len(rules) == 0 {
		t.Fatal("the alerts component renders no PrometheusRule rules")
	}
	return rules
}

// TestAlertRules renders the base with the monitoring and alerts
// components, as an operator would, and holds every alert to Prometheus's
// parser, to the metrics hpmount exports (names, labels, label values), and
// to a runbook entry in the README.
func TestAlertRules(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(deployPath(t), "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		t.Run(r.Alert, func(t *testing.T) {
			if r.Alert == "" || seen[r.Alert] {
				t.Fatalf("alert name %q empty or repeated", r.Alert)
			}
			seen[r.Alert] = true
			if len(checkQuery(t, r.Alert, r.Expr)) == 0 {
				t.Error("the expression reads no metric")
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("for %q: %v", r.For, err)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("severity %q, want warning or critical", s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("no %s annotation", a)
				}
			}
			anchor := "#" + strings.ToLower(r.Alert)
			if !strings.HasSuffix(r.Annotations["runbook_url"], "README.md"+anchor) {
				t.Errorf("runbook_url %q does not link to README.md%s", r.Annotations["runbook_url"], anchor)
			}
			entry := regexp.MustCompile(`(?m)^#### ` + r.Alert + `\n((?:.*\n)*?)(?:####|## )`).FindSubmatch(readme)
			if entry == nil {
				t.Fatalf("README.md has no runbook entry \"#### %s\"", r.Alert)
			}
			if !strings.Contains(string(entry[1]), "hpmount diag") {
				t.Errorf("the runbook entry of %s names no `hpmount diag` command", r.Alert)
			}
		})
	}
	for _, want := range []string{"HpmountVolumeNotMounted", "HpmountTenantContentRefused", "HpmountFilesystemExpansionFailed",
		"HpmountFilesystemExpansionPending", "HpmountEngineCallStuck", "HpmountAgentDown", "HpmountAgentNotReady",
		"HpmountMountinfoUnparsed", "HpmountWorkqueueRetries", "HpmountAgentMemoryNearLimit", "HpmountStorageHung"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// TestCheckExprCatches proves the checks above fail on the mistakes they
// are for, so a passing TestAlertRules means something.
func TestCheckExprCatches(t *testing.T) {
	for _, tc := range []struct{ expr, why string }{
		{`sum(hpmount_volumes{state="mountd"})`, "a state never reported"},
		{`hpmount_volume_stale_opened > 0`, "a metric that does not exist"},
		{`rate(hpmount_refusals_total{reasn="unsafe-content"}[5m])`, "a label the metric lacks"},
		{`sum by (node (hpmount_volumes)`, "not PromQL"},
		{`increase(hpmount_mount_operations_total{result=~"error|stuck"}[5m])`, "one alternative never reported"},
	} {
		if _, problems := checkExpr(tc.expr); len(problems) == 0 {
			t.Errorf("%s: %q passed the check", tc.why, tc.expr)
		}
	}
}

// grafanaDashboard is the part of a Grafana dashboard JSON the test reads.
type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars are Grafana's variables in the dashboard's queries, replaced
// by what Grafana would put there before the query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$node", ".*")

// TestDashboard parses deploy/dashboards/hpmount.json, checks every query
// as TestAlertRules checks the alerts, and that the panels an operator
// needs are there: mounts by state, attach latency, refusals, expansions.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(deployPath(t, "dashboards", "hpmount.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard title %q uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	read := map[string]bool{}
	for _, v := range d.Templating.List {
		if m := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`).FindStringSubmatch(v.Definition); m != nil {
			checkQuery(t, "variable "+v.Name, m[1])
		} else if v.Definition != "" {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Definition)
		}
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, n := range checkQuery(t, "panel "+p.Title, grafanaVars.Replace(q.Expr)) {
				read[n] = true
			}
		}
	}
	for _, want := range []string{"hpmount_volumes", "hpmount_attach_latency_seconds_bucket", "hpmount_refusals_total", "hpmount_filesystem_expansions_total",
		"hpmount_volume_stale_open", "workqueue_depth", "workqueue_retries_total", "rest_client_requests_total", "hpmount_reconcile_duration_seconds_bucket",
		"process_resident_memory_bytes", "go_gc_gomemlimit_bytes", "hpmount_migration_events_total"} {
		if !read[want] {
			t.Errorf("no panel reads %s", want)
		}
	}
}
