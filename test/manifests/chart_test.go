// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The chart is rendered in-process with helm's own packages (helm.sh/helm/v3
// v3.21.4: loader, chartutil, engine), the path `helm install` takes:
// coalesce values, validate them against values.schema.json, render.

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.LoadDir(deployPath(t, ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// renderChart renders c as release "hpmount" in namespace ns with the
// given values over values.yaml, returning the objects sorted by key.
func renderChart(c *chart.Chart, ns string, vals map[string]any) ([]object, error) {
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: name, Namespace: ns, IsInstall: true, Revision: 1}, nil)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		return nil, err
	}
	var objs []object
	for _, f := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(f, notesSuffix) {
			continue // printed after install, not applied
		}
		o, err := decodeObjects([]byte(files[f]))
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	slices.SortFunc(objs, func(a, b object) int { return strings.Compare(objectKey(a), objectKey(b)) })
	return objs, nil
}

func mustRenderChart(t *testing.T, c *chart.Chart, ns string, vals map[string]any) []object {
	t.Helper()
	objs, err := renderChart(c, ns, vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// valuesOf parses values written as YAML.
func valuesOf(t *testing.T, s string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("values %q: %v", s, err)
	}
	return v
}

// TestChartGenerated fails when the checked-in chart is not what
// `go run ./test/chartgen` writes from deploy/ now: the chart cannot drift.
func TestChartGenerated(t *testing.T) {
	want, err := GenerateChart(deployPath(t))
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range want {
		got, err := os.ReadFile(deployPath(t, ChartDir, path))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("deploy/%s/%s is not what deploy/ generates (err %v): run go run ./test/chartgen", ChartDir, path, err)
		}
	}
	// Only generated files and the hand-written schema are in the chart.
	err = filepath.WalkDir(deployPath(t, ChartDir), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(deployPath(t, ChartDir), path)
		if _, ok := want[filepath.ToSlash(rel)]; !ok && !slices.Contains(HandWritten, filepath.ToSlash(rel)) {
			t.Errorf("deploy/%s/%s is neither generated nor hand-written (HandWritten): run go run ./test/chartgen", ChartDir, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChartMatchesKustomize renders the chart with helm's engine and the
// kustomize base with krusty and compares the objects: with default values
// the chart is the base (its Namespace aside, which a helm release cannot
// own), and each component's `enabled` is that component, alone and all
// together.
func TestChartMatchesKustomize(t *testing.T) {
	c := loadChart(t)
	base := render(t, deployPath(t))
	comps, err := components(deployPath(t), objectsOf(base))
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name   string
		dirs   []string
		values map[string]any
	}
	tests := []tc{{name: "defaults", values: map[string]any{}}}
	all := tc{name: "all components", values: map[string]any{}}
	for _, comp := range comps {
		on := map[string]any{comp.value: map[string]any{"enabled": true}}
		tests = append(tests, tc{comp.dir, []string{comp.dir}, on})
		all.dirs = append(all.dirs, comp.dir)
		all.values[comp.value] = on[comp.value]
	}
	tests = append(tests, all)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := deployPath(t)
			if len(tc.dirs) > 0 {
				dir = componentOverlay(t, tc.dirs...)
			}
			var want []object
			for _, o := range objectsOf(render(t, dir)) {
				if kindOf(o) != "Namespace" {
					want = append(want, o)
				}
			}
			slices.SortFunc(want, func(a, b object) int { return strings.Compare(objectKey(a), objectKey(b)) })
			compareObjects(t, stripReleaseLabels(t, mustRenderChart(t, c, namespace, tc.values)), want)
		})
	}
}

func objectsOf(r *rendered) []object {
	var objs []object
	for _, u := range r.unstructured {
		objs = append(objs, u.Object)
	}
	return objs
}

// compareObjects reports every object that differs, as YAML.
func compareObjects(t *testing.T, got, want []object) {
	t.Helper()
	keys := func(objs []object) []string {
		var k []string
		for _, o := range objs {
			k = append(k, objectKey(o))
		}
		return k
	}
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("chart renders %v, kustomize %v", keys(got), keys(want))
	}
	for i := range got {
		g, _ := yaml.Marshal(got[i])
		w, _ := yaml.Marshal(want[i])
		if !bytes.Equal(g, w) {
			t.Errorf("%s differs:\nchart:\n%s\nkustomize:\n%s", objectKey(got[i]), g, w)
		}
	}
}

// TestChartValues renders the chart with every value changed and checks
// that each lands where it should, in a release namespace of its own.
func TestChartValues(t *testing.T) {
	objs := mustRenderChart(t, loadChart(t), "other", valuesOf(t, `
image: {registry: "registry.local:5000", repository: hpmount, tag: dev-1, pullPolicy: Always}
kubeletRoot: /data/kubelet
tolerations: [{key: dedicated, operator: Equal, value: vms, effect: NoSchedule}]
resources: {requests: {cpu: 50m}, limits: {memory: 512Mi}}
extraArgs: [--create-disk-images]
volumeStatus: {enabled: true}
`))
	var ds *rendered
	for _, o := range objs {
		if ns := metaOf(o, "namespace"); ns != "" && ns != "other" {
			t.Errorf("%s is in %q, not the release namespace", objectKey(o), ns)
		}
		if path, found := findString(o, namespace, ""); found {
			t.Errorf("%s still names %q at %s", objectKey(o), namespace, path)
		}
		if kindOf(o) == "DaemonSet" {
			data, _ := yaml.Marshal(o)
			r, err := split(data) // strict typed decoding
			if err != nil {
				t.Fatal(err)
			}
			ds = r
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	pod := ds.daemonSets[0].Spec.Template.Spec
	c := pod.Containers[0]
	root := func() string {
		for _, v := range pod.Volumes {
			if v.Name == "kubelet" {
				return v.HostPath.Path
			}
		}
		return ""
	}
	wantArgs := []string{"agent", "--node-name=$(NODE_NAME)", "--kubelet-root=/data/kubelet", "--host-proc=/host/proc",
		"--metrics-address=:9090", "--health-address=:8081", "--report-volume-status", "--create-disk-images"}
	checks := []struct{ what, got, want string }{
		{"image", c.Image, "registry.local:5000/hpmount:dev-1"},
		{"pull policy", string(c.ImagePullPolicy), "Always"},
		{"args", strings.Join(c.Args, " "), strings.Join(wantArgs, " ")},
		{"kubelet hostPath", root(), "/data/kubelet"},
		{"kubelet mount", c.VolumeMounts[0].MountPath, "/data/kubelet"},
		{"tolerations", pod.Tolerations[0].Key + "=" + pod.Tolerations[0].Value + ":" + string(pod.Tolerations[0].Effect), "dedicated=vms:NoSchedule"},
		{"tolerations count", fmt.Sprint(len(pod.Tolerations)), "1"},
		{"cpu request", c.Resources.Requests.Cpu().String(), "50m"},
		{"memory request (default kept)", c.Resources.Requests.Memory().String(), "96Mi"},
		{"memory limit", c.Resources.Limits.Memory().String(), "512Mi"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: %q, want %q", ch.what, ch.got, ch.want)
		}
	}
}

// TestValuesSchema validates values with helm's own validator (the one
// `helm install` runs, over values.yaml): the defaults pass, common
// mistakes fail, and every component and every flag the chart sets is known
// to the schema.
func TestValuesSchema(t *testing.T) {
	c := loadChart(t)
	validate := func(vals map[string]any) error {
		_, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: name, Namespace: namespace}, nil)
		return err
	}
	tests := []struct {
		name, values string
		ok           bool
	}{
		{"defaults", `{}`, true},
		{"rancher's global values", `global: {cattle: {systemDefaultRegistry: ""}}`, true},
		{"an agent flag", `extraArgs: [--create-disk-images]`, true},
		{"registry with port", `image: {registry: "registry.local:5000", repository: "hpmount"}`, true},
		{"registry with a trailing slash", `image: {registry: "registry.local/"}`, false},
		{"digest not sha256", `image: {digest: "md5:abc"}`, false},
		{"rancher's registry with a scheme", `global: {cattle: {systemDefaultRegistry: "https://harbor.corp"}}`, false},
		{"pull secret as a string", `imagePullSecrets: [ghcr]`, false},
		{"pod label replacing the chart's", `podLabels: {app.kubernetes.io/name: other}`, false},
		{"monitoring label replacing the chart's", `monitoring: {labels: {helm.sh/chart: x}}`, false},
		{"unknown update strategy", `updateStrategy: {type: Recreate}`, false},
		{"affinity misspelt", `affinity: {nodeAfinity: {}}`, false},
		{"dashboards namespace not a name", `dashboards: {namespace: Cattle_Dashboards}`, false},
		{"labels on a component without them", `storageView: {labels: {a: b}}`, false},
		{"latest tag", `image: {tag: latest}`, false},
		{"unknown pull policy", `image: {pullPolicy: Sometimes}`, false},
		{"relative kubelet root", `kubeletRoot: var/lib/kubelet`, false},
		{"kubelet root with trailing slash", `kubeletRoot: /var/lib/kubelet/`, false},
		{"no memory limit", `resources: {limits: {memory: null}}`, false},
		{"cpu limit", `resources: {limits: {cpu: 100m}}`, false},
		{"bad quantity", `resources: {requests: {memory: lots}}`, false},
		{"misspelt key", `toleration: []`, false},
		{"unknown toleration operator", `tolerations: [{operator: Maybe}]`, false},
		{"component enabled as a string", `monitoring: {enabled: "yes"}`, false},
		{"extra arg not a flag", `extraArgs: [create-disk-images]`, false},
		{"common label replacing the chart's", `commonLabels: {app.kubernetes.io/part-of: other}`, false},
		{"common label replacing the dashboard's", `commonLabels: {grafana_dashboard: "0"}`, false},
		{"no revision history", `revisionHistoryLimit: 0`, true},
		{"negative revision history", `revisionHistoryLimit: -1`, false},
		{"env repeating the base's", `env: [{name: GOMEMLIMIT, value: 100MiB}]`, false},
		{"env without a name", `env: [{value: x}]`, false},
		{"extra volume named as the base's", `extraVolumes: [{name: dev, emptyDir: {}}]`, false},
		{"extra mount with a relative path", `extraVolumeMounts: [{name: ca, mountPath: etc/ssl}]`, false},
		{"probe misspelt", `livenessProbe: {periodSecond: 5}`, false},
		{"probe handler replaced", `readinessProbe: {httpGet: null, tcpSocket: {port: health}}`, true},
		{"global registry with a scheme", `global: {imageRegistry: "https://mirror.corp"}`, false},
		{"global pull secret as a string", `global: {imagePullSecrets: [corp]}`, false},
		{"service monitor", `monitoring: {enabled: true, kind: ServiceMonitor}`, true},
		{"unknown monitor kind", `monitoring: {kind: Probe}`, false},
		{"interval without a unit", `monitoring: {interval: "30"}`, false},
		{"honorLabels as a string", `monitoring: {honorLabels: "true"}`, false},
		{"unknown relabel action", `monitoring: {relabelings: [{action: rename}]}`, false},
		{"own service account", `serviceAccount: {create: false, name: node-agents}`, true},
		{"no service account and no name", `serviceAccount: {create: false}`, false},
		{"rbac create as a string", `rbac: {create: "false"}`, false},
		{"fullname override", `{fullnameOverride: hpmount-canary, nameOverride: agent, namespaceOverride: agents}`, true},
		{"fullname override not a name", `fullnameOverride: Hpmount_Canary`, false},
		{"namespace override too long", `namespaceOverride: ` + strings.Repeat("a", 64), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(valuesOf(t, tc.values))
			if (err == nil) != tc.ok {
				t.Errorf("values %s: error %v, want ok=%t", tc.values, err, tc.ok)
			}
		})
	}

	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(c.Schema, &schema); err != nil {
		t.Fatal(err)
	}
	base := render(t, deployPath(t))
	comps, err := components(deployPath(t), objectsOf(base))
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]any{}
	for _, comp := range comps {
		if _, ok := schema.Properties[comp.value]; !ok {
			t.Errorf("deploy/%s has no %q in deploy/%s/values.schema.json: add it as the other components are", comp.dir, comp.value, ChartDir)
		}
		all[comp.value] = map[string]any{"enabled": true}
	}
	// A flag the chart sets, repeated in extraArgs, would be given twice.
	for _, o := range mustRenderChart(t, c, namespace, all) {
		if kindOf(o) != "DaemonSet" {
			continue
		}
		ctr, err := agentContainer(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, arg := range stringList(ctr["args"]) {
			flag, _, _ := strings.Cut(arg, "=")
			if !strings.HasPrefix(flag, "--") {
				continue
			}
			if validate(map[string]any{"extraArgs": []any{flag + "=x"}}) == nil {
				t.Errorf("extraArgs [%s=x] accepted, but the chart sets %s itself", flag, flag)
			}
		}
	}
}

// addon is the part of Harvester's harvesterhci.io/v1beta1 Addon the example
// uses, as pkg/apis/harvesterhci.io/v1beta1/addon.go in harvester/harvester
// defines it (AddonSpec: repo, chart, version, enabled, valuesContent).
type addon struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Repo          string `json:"repo"`
		Chart         string `json:"chart"`
		Version       string `json:"version"`
		Enabled       bool   `json:"enabled"`
		ValuesContent string `json:"valuesContent"`
	} `json:"spec"`
}

// readAddon decodes deploy/harvester/addon.yaml strictly.
func readAddon(t *testing.T) addon {
	t.Helper()
	var a addon
	if err := yaml.UnmarshalStrict(readFile(t, deployPath(t, "harvester", "addon.yaml")), &a); err != nil {
		t.Fatalf("deploy/harvester/addon.yaml: %v", err)
	}
	return a
}

// TestHarvesterAddon decodes deploy/harvester/addon.yaml strictly and holds
// it to the chart: its name and version, values the schema accepts, the
// repository left for the operator to name (HPMOUNT_CHART_REPO), and the
// namespace deploy/namespace.yaml creates (Harvester installs the release in
// the Addon's own namespace, which must carry the Pod Security labels).
func TestHarvesterAddon(t *testing.T) {
	a := readAddon(t)
	c := loadChart(t)
	checks := []struct {
		what      string
		got, want any
	}{
		{"apiVersion", a.APIVersion, "harvesterhci.io/v1beta1"},
		{"kind", a.Kind, "Addon"},
		{"namespace", a.Metadata.Namespace, namespace},
		{"chart", a.Spec.Chart, c.Metadata.Name},
		{"version", a.Spec.Version, c.Metadata.Version},
		// No URL that looks real: the operator serves the repository
		// (TestChartRepository) and names it.
		{"repo", a.Spec.Repo, repoVar},
		// Harvester's add-on development guide: the UI marks add-ons with
		// this label experimental; hpmount is not packaged in Harvester.
		{"experimental label", a.Metadata.Labels["addon.harvesterhci.io/experimental"], "true"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("addon %s: %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	objs, err := renderChart(c, a.Metadata.Namespace, valuesOf(t, a.Spec.ValuesContent))
	if err != nil {
		t.Fatalf("chart with the addon's valuesContent: %v", err)
	}
	if !slices.ContainsFunc(objs, func(o object) bool { return kindOf(o) == "DaemonSet" }) {
		t.Error("chart with the addon's valuesContent renders no DaemonSet")
	}
}

// TestGeneratorRefusesUntemplatable proves the generator fails, rather than
// drop the change, on a Component doing what the chart cannot express.
func TestGeneratorRefusesUntemplatable(t *testing.T) {
	patch := func(kind, name, op string) string {
		return fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n  - target: {kind: %s, name: %s}\n    patch: |-\n      - %s\n", kind, name, op)
	}
	tests := []struct{ name, component, wantErr string }{
		{"changes the pod", patch("DaemonSet", name, "{op: add, path: /spec/template/spec/hostNetwork, value: true}"), "beyond appending args"},
		{"rewrites an arg", patch("DaemonSet", name, "{op: replace, path: /spec/template/spec/containers/0/args/0, value: diag}"), "only appending"},
		{"changes a base role", patch("ClusterRole", name, "{op: add, path: /rules/-, value: {apiGroups: [''], resources: [nodes], verbs: [get]}}"), "cannot template"},
		{"appends an arg", patch("DaemonSet", name, "{op: add, path: /spec/template/spec/containers/0/args/-, value: --x}"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"kustomization.yaml", "namespace.yaml", "rbac.yaml", "daemonset.yaml"} {
				data, err := os.ReadFile(deployPath(t, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Mkdir(filepath.Join(dir, "c"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "c", "kustomization.yaml"), []byte(tc.component), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := GenerateChart(dir)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("generate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("generate: error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
