// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// releaseLabels are the labels _helpers.tpl puts on every object and the
// agent's pods, for release "hpmount" of the chart as it is.
func releaseLabels(t *testing.T) map[string]string {
	t.Helper()
	c := loadChart(t)
	return map[string]string{
		"app.kubernetes.io/instance":   name,
		"app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart":                c.Metadata.Name + "-" + c.Metadata.Version,
	}
}

// labelMaps returns the label maps of obj the chart adds release labels to:
// its own and, for a DaemonSet, its pod template's.
func labelMaps(obj object) map[string]map[string]any {
	out := map[string]map[string]any{}
	if l, ok := nested(obj, "metadata")["labels"].(map[string]any); ok {
		out["metadata.labels"] = l
	}
	if kindOf(obj) == "DaemonSet" {
		if l, ok := nested(obj, "spec", "template", "metadata")["labels"].(map[string]any); ok {
			out["pod labels"] = l
		}
	}
	return out
}

// stripReleaseLabels checks that every object of a chart render carries
// the release labels and removes them, leaving what kustomize renders.
func stripReleaseLabels(t *testing.T, objs []object) []object {
	t.Helper()
	want := releaseLabels(t)
	for _, o := range objs {
		maps := labelMaps(o)
		if len(maps) == 0 {
			t.Errorf("%s has no labels", objectKey(o))
		}
		for where, l := range maps {
			for k, v := range want {
				if l[k] != v {
					t.Errorf("%s %s: %s=%v, want %q", objectKey(o), where, k, l[k], v)
				}
				delete(l, k)
			}
			if len(l) == 0 {
				delete(nested(o, "metadata"), "labels")
			}
		}
	}
	return objs
}

// chartDaemonSet renders the chart with values and decodes its DaemonSet
// strictly, as the API server's types have it.
func chartDaemonSet(t *testing.T, objs []object) appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if kindOf(o) != "DaemonSet" {
			continue
		}
		data, _ := yaml.Marshal(o)
		r, err := split(data)
		if err != nil {
			t.Fatal(err)
		}
		return r.daemonSets[0]
	}
	t.Fatal("no DaemonSet rendered")
	return appsv1.DaemonSet{}
}

func objectOf(objs []object, kind string) object {
	for _, o := range objs {
		if kindOf(o) == kind {
			return o
		}
	}
	return nil
}

func labelOf(o object, key string) string {
	l, _ := nested(o, "metadata")["labels"].(map[string]any)
	s, _ := l[key].(string)
	return s
}

// valueCase renders the chart with one value set and says what of the
// render is wrong, "" if nothing.
type valueCase struct {
	key    string // the value's path in values.yaml
	values string
	check  func(t *testing.T, objs []object) string
}

func dsCheck(f func(ds appsv1.DaemonSet) (got, want string)) func(*testing.T, []object) string {
	return func(t *testing.T, objs []object) string {
		got, want := f(chartDaemonSet(t, objs))
		if got != want {
			return fmt.Sprintf("%q, want %q", got, want)
		}
		return ""
	}
}

func labelCheck(kind, key, want string) func(*testing.T, []object) string {
	return func(_ *testing.T, objs []object) string {
		o := objectOf(objs, kind)
		if o == nil {
			return "no " + kind
		}
		if got := labelOf(o, key); got != want {
			return fmt.Sprintf("%s label %s=%q, want %q", kind, key, got, want)
		}
		return ""
	}
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// valueCases (and operatorValueCases) have one render per value of
// values.yaml; TestChartEveryValueRendered fails for a value without one.
var valueCases = []valueCase{
	{"image.registry", `image: {registry: "registry.local:5000"}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "registry.local:5000/hpmount/hpmount:v0.1.0"
	})},
	{"image.registry", `image: {registry: ""}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "hpmount/hpmount:v0.1.0"
	})},
	{"image.repository", `image: {repository: mirror/hpmount}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "ghcr.io/mirror/hpmount:v0.1.0"
	})},
	{"image.tag", `image: {tag: v0.2.0-rc.1}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "ghcr.io/hpmount/hpmount:v0.2.0-rc.1"
	})},
	{"image.digest", `image: {digest: ` + digest + `}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "ghcr.io/hpmount/hpmount@" + digest
	})},
	{"image.pullPolicy", `image: {pullPolicy: Always}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return string(ds.Spec.Template.Spec.Containers[0].ImagePullPolicy), "Always"
	})},
	// Rancher's charts prefix the system default registry to the image.
	{"global.cattle.systemDefaultRegistry", `{global: {cattle: {systemDefaultRegistry: "harbor.corp:8443"}}, image: {digest: ` + digest + `}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "harbor.corp:8443/hpmount/hpmount@" + digest
	})},
	{"global.cattle.systemDefaultRegistry", `global: {cattle: {systemDefaultRegistry: ""}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].Image, "ghcr.io/hpmount/hpmount:v0.1.0"
	})},
	{"imagePullSecrets", `imagePullSecrets: [{name: ghcr}, {name: mirror}]`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		var names []string
		for _, s := range ds.Spec.Template.Spec.ImagePullSecrets {
			names = append(names, s.Name)
		}
		return strings.Join(names, ","), "ghcr,mirror"
	})},
	{"kubeletRoot", `kubeletRoot: /data/kubelet`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPath + " " + ds.Spec.Template.Spec.Volumes[0].HostPath.Path, "/data/kubelet /data/kubelet"
	})},
	{"tolerations", `tolerations: [{key: dedicated, operator: Equal, value: vms, effect: NoSchedule}]`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		tl := ds.Spec.Template.Spec.Tolerations
		return fmt.Sprint(len(tl), tl[0].Key, tl[0].Value), "1dedicatedvms"
	})},
	{"nodeSelector", `nodeSelector: {kubernetes.io/os: linux, kubevirt.io/schedulable: "true"}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return fmt.Sprint(ds.Spec.Template.Spec.NodeSelector), "map[kubernetes.io/os:linux kubevirt.io/schedulable:true]"
	})},
	// helm merges maps into the defaults: a key is removed by null.
	{"nodeSelector", `nodeSelector: {kubernetes.io/os: null}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return fmt.Sprint(len(ds.Spec.Template.Spec.NodeSelector)), "0"
	})},
	{"affinity", `affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/worker, operator: Exists}]}]}}}`,
		dsCheck(func(ds appsv1.DaemonSet) (string, string) {
			a := ds.Spec.Template.Spec.Affinity
			if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
				return "no node affinity", "node-role.kubernetes.io/worker"
			}
			return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key, "node-role.kubernetes.io/worker"
		})},
	{"podAnnotations", `podAnnotations: {example.com/team: storage}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return fmt.Sprint(ds.Spec.Template.Annotations), "map[example.com/team:storage]"
	})},
	{"podLabels", `podLabels: {example.com/team: storage}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		l := ds.Spec.Template.Labels
		return l["example.com/team"] + " " + l["app.kubernetes.io/name"] + " " + fmt.Sprint(len(ds.Spec.Selector.MatchLabels)), "storage hpmount 2"
	})},
	{"updateStrategy", `updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: "10%"}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "10%"
	})},
	{"updateStrategy", `updateStrategy: {type: OnDelete}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return string(ds.Spec.UpdateStrategy.Type), "OnDelete"
	})},
	{"priorityClassName", `priorityClassName: hpmount-critical`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.PriorityClassName, "hpmount-critical"
	})},
	{"priorityClassName", `priorityClassName: ""`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return ds.Spec.Template.Spec.PriorityClassName, ""
	})},
	{"resources", `resources: {requests: {cpu: 50m}, limits: {memory: 512Mi}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		r := ds.Spec.Template.Spec.Containers[0].Resources
		return r.Requests.Cpu().String() + " " + r.Limits.Memory().String(), "50m 512Mi"
	})},
	{"extraArgs", `extraArgs: [--create-disk-images]`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		a := ds.Spec.Template.Spec.Containers[0].Args
		return a[len(a)-1], "--create-disk-images"
	})},
	{"monitoring.enabled", `monitoring: {enabled: true}`, labelCheck("PodMonitor", "app.kubernetes.io/name", name)},
	{"monitoring.labels", `monitoring: {enabled: true, labels: {release: kube-prometheus-stack}}`, labelCheck("PodMonitor", "release", "kube-prometheus-stack")},
	{"alerts.enabled", `alerts: {enabled: true}`, labelCheck("PrometheusRule", "app.kubernetes.io/name", name)},
	{"alerts.labels", `alerts: {enabled: true, labels: {release: rancher-monitoring}}`, labelCheck("PrometheusRule", "release", "rancher-monitoring")},
	{"dashboards.enabled", `dashboards: {enabled: true}`, func(_ *testing.T, objs []object) string {
		cm := objectOf(objs, "ConfigMap")
		data, _ := nested(cm, "data")["hpmount.json"].(string)
		switch {
		case cm == nil:
			return "no ConfigMap"
		case labelOf(cm, dashboardLabel) != "1":
			return "ConfigMap not labelled grafana_dashboard: \"1\""
		case metaOf(cm, "namespace") != "other":
			return "ConfigMap in " + metaOf(cm, "namespace") + ", not the release's namespace"
		case !strings.Contains(data, `"uid": "hpmount-hotplug"`) || !strings.Contains(data, "{{node}}"):
			return "ConfigMap does not hold deploy/dashboards/hpmount.json as it is"
		}
		return ""
	}},
	{"dashboards.namespace", `dashboards: {enabled: true, namespace: cattle-dashboards}`, func(_ *testing.T, objs []object) string {
		if ns := metaOf(objectOf(objs, "ConfigMap"), "namespace"); ns != "cattle-dashboards" {
			return "ConfigMap in " + ns
		}
		return ""
	}},
	{"volumeStatus.enabled", `volumeStatus: {enabled: true}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return fmt.Sprint(slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--report-volume-status")), "true"
	})},
	{"storageView.enabled", `storageView: {enabled: true}`, func(_ *testing.T, objs []object) string {
		for _, o := range objs {
			if kindOf(o) == "ClusterRole" && metaOf(o, "name") == "hpmount-storage-view" {
				return ""
			}
		}
		return "no ClusterRole hpmount-storage-view"
	}},
}

// TestChartEachValue renders the chart in namespace "other" with each value
// of valueCases and checks where it lands; every render carries the release
// labels and validates against values.schema.json (helm validates first).
func TestChartEachValue(t *testing.T) {
	c := loadChart(t)
	for i, vc := range everyValueCase() {
		t.Run(fmt.Sprintf("%s/%d", vc.key, i), func(t *testing.T) {
			objs, err := renderChart(c, "other", valuesOf(t, vc.values))
			if err != nil {
				t.Fatalf("values %s: %v", vc.values, err)
			}
			if msg := vc.check(t, objs); msg != "" {
				t.Errorf("values %s: %s", vc.values, msg)
			}
			stripReleaseLabels(t, objs)
		})
	}
}

// leafKeys lists the paths of values.yaml's keys: a map's keys are walked
// into, except maps whose keys are the operator's (labels, selectors,
// resources) or that are one object of the API (probes), which are one
// value.
func leafKeys(prefix string, v map[string]any) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(v)) {
		path := strings.TrimPrefix(prefix+"."+k, ".")
		m, isMap := v[k].(map[string]any)
		if !isMap || len(m) == 0 || slices.Contains([]string{"nodeSelector", "resources", "updateStrategy", "livenessProbe", "readinessProbe"}, path) {
			out = append(out, path)
			continue
		}
		out = append(out, leafKeys(path, m)...)
	}
	return out
}

// TestChartEveryValueRendered fails for a key of values.yaml (or Rancher's
// global.cattle.systemDefaultRegistry) that valueCases does not render.
func TestChartEveryValueRendered(t *testing.T) {
	c := loadChart(t)
	keys := append(leafKeys("", c.Values), "global.cattle.systemDefaultRegistry")
	for _, k := range keys {
		if !slices.ContainsFunc(everyValueCase(), func(vc valueCase) bool { return vc.key == k }) {
			t.Errorf("value %s has no render test in valueCases", k)
		}
	}
}

// chartWithEveryValue renders the chart in the base's namespace with every
// value of valueCases that the API server can check without the
// Prometheus Operator, merged, and returns the base's Namespace and the
// rendered objects as one multi-document YAML.
func chartWithEveryValue(t *testing.T) []byte {
	t.Helper()
	vals := valuesOf(t, `
image: {registry: "registry.local:5000", digest: `+digest+`}
imagePullSecrets: [{name: ghcr}]
nodeSelector: {kubevirt.io/schedulable: "true"}
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/worker, operator: Exists}]}]}}}
podAnnotations: {example.com/team: storage}
podLabels: {example.com/team: storage}
updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: "10%"}}
extraArgs: [--create-disk-images]
fullnameOverride: hpmount-canary
commonLabels: {example.com/owner: platform}
revisionHistoryLimit: 3
env: [{name: GODEBUG, value: madvdontneed=1}]
extraVolumes: [{name: ca, configMap: {name: corp-ca}}]
extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/corp, readOnly: true}]
livenessProbe: {periodSeconds: 20}
readinessProbe: {httpGet: null, tcpSocket: {port: health}}
global: {imageRegistry: mirror.corp, imagePullSecrets: [{name: corp}]}
serviceAccount: {name: hpmount-agent, annotations: {example.com/role: hotplug}}
dashboards: {enabled: true}
volumeStatus: {enabled: true}
storageView: {enabled: true}
`)
	objs := mustRenderChart(t, loadChart(t), namespace, vals)
	out := readFile(t, deployPath(t, "namespace.yaml"))
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, "\n---\n"...), data...)
	}
	return out
}
