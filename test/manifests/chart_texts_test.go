// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// notesSuffix ends the name of the notes helm prints after an install.
const notesSuffix = "/NOTES.txt"

// renderNotes renders the chart's NOTES.txt in namespace ns with vals.
func renderNotes(t *testing.T, ns string, vals map[string]any) string {
	t.Helper()
	c := loadChart(t)
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: name, Namespace: ns, IsInstall: true, Revision: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		t.Fatal(err)
	}
	for f, text := range files {
		if strings.HasSuffix(f, notesSuffix) {
			return text
		}
	}
	t.Fatal("the chart renders no NOTES.txt")
	return ""
}

// TestChartNotes renders NOTES.txt: it names the release's namespace in
// its commands and says what the chosen values leave undone.
func TestChartNotes(t *testing.T) {
	tests := []struct {
		values       string
		want, refuse []string
	}{
		{`{}`, []string{"-n other rollout status daemonset/hpmount", "pod-security.kubernetes.io/enforce: privileged", "kubectl hpmount diag NODE", "set monitoring.enabled=true"}, []string{namespace}},
		{`monitoring: {enabled: true}`, nil, []string{"set monitoring.enabled=true", "alerts.enabled is set"}},
		{`alerts: {enabled: true}`, []string{"alerts.enabled is set without monitoring.enabled"}, nil},
		{`{fullnameOverride: hpmount-canary, namespaceOverride: agents}`, []string{"-n agents rollout status daemonset/hpmount-canary", "--agent-namespace agents"}, []string{"-n other"}},
	}
	for _, tc := range tests {
		notes := renderNotes(t, "other", valuesOf(t, tc.values))
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("values %s: notes lack %q:\n%s", tc.values, w, notes)
			}
		}
		for _, r := range tc.refuse {
			if strings.Contains(notes, r) {
				t.Errorf("values %s: notes say %q:\n%s", tc.values, r, notes)
			}
		}
	}
}

// question is one entry of Rancher's questions.yaml, as Rancher's
// catalog reads it (variable, label, description, type, default, group,
// show_if, show_subquestion_if, subquestions).
type question struct {
	Variable          string     `json:"variable"`
	Label             string     `json:"label"`
	Description       string     `json:"description,omitempty"`
	Type              string     `json:"type"`
	Default           any        `json:"default"`
	Group             string     `json:"group,omitempty"`
	ShowIf            string     `json:"show_if,omitempty"`
	ShowSubquestionIf any        `json:"show_subquestion_if,omitempty"`
	Subquestions      []question `json:"subquestions,omitempty"`
}

// formDefaults are the questions whose default differs from values.yaml's
// on purpose, with why.
var formDefaults = map[string]string{
	"dashboards.namespace": "Rancher's form: Rancher Monitoring's Grafana reads cattle-dashboards",
}

// valueAt walks a dotted path of values.
func valueAt(vals map[string]any, path string) (any, bool) {
	keys := strings.Split(path, ".")
	cur := any(vals)
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// setAt sets a dotted path of values, making maps on the way.
func setAt(vals map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := vals[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			vals[k] = next
		}
		vals = next
	}
	vals[keys[len(keys)-1]] = v
}

// TestChartQuestions decodes questions.yaml strictly and holds each
// question to values.yaml: the variable exists, its type is the value's,
// its default is the value's (formDefaults aside), and the chart renders
// with every answer the form gives by default.
func TestChartQuestions(t *testing.T) {
	c := loadChart(t)
	var q struct {
		Categories []string   `json:"categories"`
		Namespace  string     `json:"namespace"`
		Questions  []question `json:"questions"`
	}
	var data []byte
	for _, f := range c.Files {
		if f.Name == "questions.yaml" {
			data = f.Data
		}
	}
	if err := yaml.UnmarshalStrict(data, &q); err != nil {
		t.Fatalf("questions.yaml: %v", err)
	}
	if q.Namespace != namespace {
		t.Errorf("questions.yaml namespace %q, want %q (deploy/namespace.yaml)", q.Namespace, namespace)
	}
	answers := map[string]any{}
	var check func(qs []question)
	check = func(qs []question) {
		for _, qu := range qs {
			v, ok := valueAt(c.Values, qu.Variable)
			if !ok {
				t.Errorf("question %s: no such value in values.yaml", qu.Variable)
				continue
			}
			kind := map[string]string{"boolean": "bool", "string": "string", "int": "float64"}[qu.Type]
			if got := fmt.Sprintf("%T", v); got != kind {
				t.Errorf("question %s: type %s, but the value is a %s", qu.Variable, qu.Type, got)
			}
			if _, why := formDefaults[qu.Variable]; !why && !reflect.DeepEqual(qu.Default, v) {
				t.Errorf("question %s: default %v, values.yaml %v", qu.Variable, qu.Default, v)
			}
			if qu.Label == "" {
				t.Errorf("question %s has no label", qu.Variable)
			}
			setAt(answers, qu.Variable, qu.Default)
			check(qu.Subquestions)
		}
	}
	check(q.Questions)
	for k := range formDefaults {
		if _, ok := valueAt(answers, k); !ok {
			t.Errorf("formDefaults names %s, which no question asks", k)
		}
	}
	if _, err := renderChart(c, namespace, answers); err != nil {
		t.Errorf("chart with the form's default answers: %v", err)
	}
}

// TestChartKubeVersion checks Chart.yaml's kubeVersion as helm install
// does: the distributions hpmount runs on pass (RKE2's build metadata,
// EKS's pre-release suffix), a cluster without enforced Pod Security
// labels does not.
func TestChartKubeVersion(t *testing.T) {
	c := loadChart(t)
	for v, ok := range map[string]bool{"v1.25.0": true, "v1.31.4+rke2r1": true, "v1.30.2-eks-2e66e5e": true, "v1.33.1": true, "v1.24.17": false} {
		if got := chartutil.IsCompatibleRange(c.Metadata.KubeVersion, v); got != ok {
			t.Errorf("kubeVersion %q admits %s: %t, want %t", c.Metadata.KubeVersion, v, got, ok)
		}
	}
}
