// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The values an operator expects of a node agent's chart beside
// prometheus-node-exporter's: common labels, revision history, env, extra
// volumes, probes, global registry and pull secrets, the monitor's settings
// and kind, and the ServiceAccount and RBAC switches.

// allComponents turns every component on, so that a value meant for every
// object meets all of them.
const allComponents = `monitoring: {enabled: true}, alerts: {enabled: true}, dashboards: {enabled: true}, volumeStatus: {enabled: true}, storageView: {enabled: true}`

// everyValueCase is valueCases and operatorValueCases.
func everyValueCase() []valueCase {
	return slices.Concat(valueCases, operatorValueCases)
}

// objectNamed returns the rendered object of that kind and name, nil if none.
func objectNamed(objs []object, kind, name string) object {
	for _, o := range objs {
		if kindOf(o) == kind && metaOf(o, "name") == name {
			return o
		}
	}
	return nil
}

// monitorCheck checks the one endpoint of the rendered monitor of kind.
func monitorCheck(kind string, f func(ep map[string]any) (got, want string)) func(*testing.T, []object) string {
	return func(_ *testing.T, objs []object) string {
		m := objectOf(objs, kind)
		if m == nil {
			return "no " + kind
		}
		ep, err := monitorEndpoint(m)
		if err != nil {
			return err.Error()
		}
		if got, want := f(ep); got != want {
			return fmt.Sprintf("%s endpoint: %q, want %q", kind, got, want)
		}
		return ""
	}
}

// subjectsOf lists "kind/namespace/name" of every binding's subjects.
func subjectsOf(objs []object) []string {
	var out []string
	for _, o := range objs {
		subjects, _ := o["subjects"].([]any)
		for _, s := range subjects {
			m, _ := s.(map[string]any)
			out = append(out, fmt.Sprintf("%s/%s/%s", m["kind"], m["namespace"], m["name"]))
		}
	}
	return out
}

// serviceAccountCheck checks the agent's ServiceAccount wherever it is
// named: the DaemonSet and every binding's subject, and whether the chart
// renders it.
func serviceAccountCheck(want string, created bool) func(*testing.T, []object) string {
	return func(t *testing.T, objs []object) string {
		if got := chartDaemonSet(t, objs).Spec.Template.Spec.ServiceAccountName; got != want {
			return fmt.Sprintf("DaemonSet runs as %q, want %q", got, want)
		}
		subjects := subjectsOf(objs)
		if len(subjects) == 0 {
			return "no binding rendered"
		}
		for _, s := range subjects {
			if s != "ServiceAccount/other/"+want {
				return fmt.Sprintf("a binding's subject is %s, want ServiceAccount/other/%s", s, want)
			}
		}
		sa := objectOf(objs, "ServiceAccount")
		switch {
		case created && (sa == nil || metaOf(sa, "name") != want):
			return fmt.Sprintf("ServiceAccount %v, want %s", sa, want)
		case !created && sa != nil:
			return "a ServiceAccount is rendered with serviceAccount.create false"
		}
		return ""
	}
}

func podImage(ds appsv1.DaemonSet) string { return ds.Spec.Template.Spec.Containers[0].Image }

var operatorValueCases = []valueCase{
	{"commonLabels", `{commonLabels: {example.com/team: storage}, ` + allComponents + `}`, func(_ *testing.T, objs []object) string {
		kinds := map[string]bool{}
		for _, o := range objs {
			kinds[kindOf(o)] = true
			for where, l := range labelMaps(o) {
				if l["example.com/team"] != "storage" {
					return fmt.Sprintf("%s %s lack the common label: %v", objectKey(o), where, l)
				}
			}
		}
		if len(kinds) < 7 {
			return fmt.Sprintf("only kinds %v rendered", kinds)
		}
		// A DaemonSet's selector cannot change after install.
		if _, ok := nested(objectOf(objs, "DaemonSet"), "spec", "selector", "matchLabels")["example.com/team"]; ok {
			return "the DaemonSet's selector carries the common label"
		}
		return ""
	}},
	// A key in both is given once, podLabels' value.
	{"commonLabels", `{commonLabels: {example.com/team: storage, example.com/tier: node}, podLabels: {example.com/team: hotplug}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		l := ds.Spec.Template.Labels
		return l["example.com/team"] + " " + l["example.com/tier"] + " " + ds.Labels["example.com/team"], "hotplug node storage"
	})},
	{"revisionHistoryLimit", `revisionHistoryLimit: 3`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		if ds.Spec.RevisionHistoryLimit == nil {
			return "none", "3"
		}
		return fmt.Sprint(*ds.Spec.RevisionHistoryLimit), "3"
	})},
	// 0 is a setting (keep no old revision), not "unset".
	{"revisionHistoryLimit", `revisionHistoryLimit: 0`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		if ds.Spec.RevisionHistoryLimit == nil {
			return "none", "0"
		}
		return fmt.Sprint(*ds.Spec.RevisionHistoryLimit), "0"
	})},
	{"env", `env: [{name: GODEBUG, value: madvdontneed=1}, {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		var names []string
		for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
			names = append(names, e.Name+"="+e.Value)
		}
		return strings.Join(names, " "), "NODE_NAME= GOMEMLIMIT= GODEBUG=madvdontneed=1 POD_IP="
	})},
	{"extraVolumes", `extraVolumes: [{name: ca, configMap: {name: corp-ca}}]`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		v := ds.Spec.Template.Spec.Volumes
		last := v[len(v)-1]
		if last.ConfigMap == nil {
			return last.Name + " not a configMap volume", "ca corp-ca"
		}
		return fmt.Sprintf("%d %s %s", len(v), last.Name, last.ConfigMap.Name), "6 ca corp-ca"
	})},
	{"extraVolumeMounts", `{extraVolumes: [{name: ca, configMap: {name: corp-ca}}], extraVolumeMounts: [{name: ca, mountPath: /etc/ssl/corp, readOnly: true}]}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		m := ds.Spec.Template.Spec.Containers[0].VolumeMounts
		last := m[len(m)-1]
		return fmt.Sprintf("%d %s %s %t", len(m), last.Name, last.MountPath, last.ReadOnly), "6 ca /etc/ssl/corp true"
	})},
	// helm merges a setting into the base's probe.
	{"livenessProbe", `livenessProbe: {periodSeconds: 20, failureThreshold: 6}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		p := ds.Spec.Template.Spec.Containers[0].LivenessProbe
		return fmt.Sprintf("%s %s %d %d %d", p.HTTPGet.Path, p.HTTPGet.Port.String(), p.PeriodSeconds, p.FailureThreshold, p.TimeoutSeconds), "/healthz health 20 6 3"
	})},
	// null removes the base's handler, so another replaces it.
	{"livenessProbe", `livenessProbe: {httpGet: null, tcpSocket: {port: health}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		p := ds.Spec.Template.Spec.Containers[0].LivenessProbe
		if p.TCPSocket == nil {
			return fmt.Sprintf("%+v", p.ProbeHandler), "tcpSocket health"
		}
		return fmt.Sprintf("%t %s", p.HTTPGet == nil, p.TCPSocket.Port.String()), "true health"
	})},
	{"readinessProbe", `readinessProbe: {timeoutSeconds: 5}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		p := ds.Spec.Template.Spec.Containers[0].ReadinessProbe
		return fmt.Sprintf("%s %d %d", p.HTTPGet.Path, p.TimeoutSeconds, p.PeriodSeconds), "/readyz 5 10"
	})},
	{"global.imageRegistry", `global: {imageRegistry: mirror.corp:5000}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return podImage(ds), "mirror.corp:5000/hpmount/hpmount:v0.1.0"
	})},
	// Chosen for this release, it wins over the registry Rancher passes to
	// every app.
	{"global.imageRegistry", `global: {imageRegistry: mirror.corp, cattle: {systemDefaultRegistry: harbor.corp}}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		return podImage(ds), "mirror.corp/hpmount/hpmount:v0.1.0"
	})},
	{"global.imagePullSecrets", `{global: {imagePullSecrets: [{name: corp}, {name: ghcr}]}, imagePullSecrets: [{name: ghcr}]}`, dsCheck(func(ds appsv1.DaemonSet) (string, string) {
		var names []string
		for _, s := range ds.Spec.Template.Spec.ImagePullSecrets {
			names = append(names, s.Name)
		}
		return strings.Join(names, ","), "ghcr,corp"
	})},
	{"monitoring.interval", `monitoring: {enabled: true, interval: 1m}`, monitorCheck("PodMonitor", func(ep map[string]any) (string, string) {
		return fmt.Sprintf("%v %v", ep["interval"], ep["scrapeTimeout"]), "1m 10s"
	})},
	{"monitoring.scrapeTimeout", `monitoring: {enabled: true, scrapeTimeout: 20s}`, monitorCheck("PodMonitor", func(ep map[string]any) (string, string) {
		return fmt.Sprintf("%v %v", ep["interval"], ep["scrapeTimeout"]), "30s 20s"
	})},
	{"monitoring.honorLabels", `monitoring: {enabled: true, honorLabels: false}`, monitorCheck("PodMonitor", func(ep map[string]any) (string, string) {
		return fmt.Sprintf("%#v", ep["honorLabels"]), "false"
	})},
	{"monitoring.honorLabels", `monitoring: {enabled: true}`, monitorCheck("PodMonitor", func(ep map[string]any) (string, string) {
		return fmt.Sprintf("%#v", ep["honorLabels"]), "true"
	})},
	// The operator's relabelings follow the base's node relabeling, which
	// the alerts read.
	{"monitoring.relabelings", `monitoring: {enabled: true, relabelings: [{targetLabel: cluster, replacement: east}]}`, monitorCheck("PodMonitor", func(ep map[string]any) (string, string) {
		var targets []string
		for _, r := range ep["relabelings"].([]any) {
			targets = append(targets, fmt.Sprint(r.(map[string]any)["targetLabel"]))
		}
		return strings.Join(targets, ","), "node,cluster"
	})},
	{"monitoring.metricRelabelings", `monitoring: {enabled: true, metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: "go_memstats_.*"}]}`, monitorCheck("PodMonitor", func(ep map[string]any) (string, string) {
		mr, _ := ep["metricRelabelings"].([]any)
		if len(mr) != 1 {
			return fmt.Sprint(mr), "one drop"
		}
		r := mr[0].(map[string]any)
		return fmt.Sprintf("%v %v %v", r["action"], r["regex"], ep["port"]), "drop go_memstats_.* metrics"
	})},
	{"monitoring.kind", `monitoring: {enabled: true, kind: ServiceMonitor, labels: {release: kube-prometheus-stack}, interval: 1m, metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: "go_gc_.*"}]}`, serviceMonitorCheck},
	{"monitoring.kind", `monitoring: {enabled: true, kind: PodMonitor}`, func(_ *testing.T, objs []object) string {
		if objectOf(objs, "PodMonitor") == nil || objectOf(objs, "ServiceMonitor") != nil || objectOf(objs, "Service") != nil {
			return "want the PodMonitor alone"
		}
		return ""
	}},
	{"serviceAccount.name", `{serviceAccount: {name: hpmount-agent}, ` + allComponents + `}`, serviceAccountCheck("hpmount-agent", true)},
	{"serviceAccount.create", `{serviceAccount: {create: false, name: node-agents}, ` + allComponents + `}`, serviceAccountCheck("node-agents", false)},
	{"serviceAccount.annotations", `serviceAccount: {annotations: {example.com/role: hotplug}}`, func(_ *testing.T, objs []object) string {
		a, _ := nested(objectOf(objs, "ServiceAccount"), "metadata")["annotations"].(map[string]any)
		if a["example.com/role"] != "hotplug" {
			return fmt.Sprintf("ServiceAccount annotations %v", a)
		}
		return ""
	}},
	{"rbac.create", `{rbac: {create: false}, ` + allComponents + `}`, func(t *testing.T, objs []object) string {
		for _, o := range objs {
			if strings.HasPrefix(kindOf(o), "ClusterRole") {
				return objectKey(o) + " rendered with rbac.create false"
			}
		}
		if chartDaemonSet(t, objs).Spec.Template.Spec.ServiceAccountName != name || objectOf(objs, "ServiceAccount") == nil {
			return "the ServiceAccount is not the chart's"
		}
		return ""
	}},
	{"fullnameOverride", `{fullnameOverride: hpmount-canary, ` + allComponents + `}`, namesCheck("hpmount-canary")},
	// The ServiceMonitor's Service is named too; release "hpmount" does
	// not contain "agent", so the name is <release>-agent.
	{"nameOverride", `{nameOverride: agent, monitoring: {enabled: true, kind: ServiceMonitor}, alerts: {enabled: true}, dashboards: {enabled: true}, volumeStatus: {enabled: true}, storageView: {enabled: true}}`, namesCheck("hpmount-agent")},
	// Helm's usual fullname: the release's name when it contains nameOverride.
	{"nameOverride", `{nameOverride: hpm, ` + allComponents + `}`, namesCheck(name)},
	{"namespaceOverride", `{namespaceOverride: hpmount-agents, ` + allComponents + `}`, func(_ *testing.T, objs []object) string {
		for _, o := range objs {
			if ns := metaOf(o, "namespace"); !strings.HasPrefix(kindOf(o), "ClusterRole") && ns != "hpmount-agents" {
				return fmt.Sprintf("%s in %q", objectKey(o), ns)
			}
		}
		for _, s := range subjectsOf(objs) {
			if !strings.HasPrefix(s, "ServiceAccount/hpmount-agents/") {
				return "a binding's subject is " + s
			}
		}
		return ""
	}},
}

// serviceMonitorCheck holds the ServiceMonitor variant to what Prometheus
// needs of it: no PodMonitor; a headless Service selecting exactly the
// agent pods, on the port the agent serves metrics on; a ServiceMonitor
// selecting that Service and scraping that port with the PodMonitor's
// settings and the values.
func serviceMonitorCheck(t *testing.T, objs []object) string {
	if objectOf(objs, "PodMonitor") != nil {
		return "a PodMonitor is rendered beside the ServiceMonitor"
	}
	svc, sm := objectOf(objs, "Service"), objectOf(objs, "ServiceMonitor")
	if svc == nil || sm == nil {
		return "want a Service and a ServiceMonitor"
	}
	ds := chartDaemonSet(t, objs)
	spec := nested(svc, "spec")
	if spec["clusterIP"] != "None" {
		return fmt.Sprintf("Service clusterIP %v, want None (headless)", spec["clusterIP"])
	}
	selector, _ := spec["selector"].(map[string]any)
	if fmt.Sprint(selector) != fmt.Sprint(ds.Spec.Selector.MatchLabels) {
		return fmt.Sprintf("Service selects %v, the DaemonSet's pods are %v", selector, ds.Spec.Selector.MatchLabels)
	}
	ports, _ := spec["ports"].([]any)
	if len(ports) != 1 {
		return fmt.Sprintf("Service ports %v", ports)
	}
	port := ports[0].(map[string]any)
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool {
		return p.Name == port["targetPort"] && fmt.Sprint(p.ContainerPort) == fmt.Sprint(port["port"])
	}) {
		return fmt.Sprintf("Service port %v is not the agent's", port)
	}
	smSelector, _ := nested(sm, "spec", "selector")["matchLabels"].(map[string]any)
	for k, v := range smSelector {
		if labelOf(svc, k) != v {
			return fmt.Sprintf("ServiceMonitor selects %s=%v, which the Service lacks", k, v)
		}
	}
	if len(smSelector) == 0 || labelOf(sm, "release") != "kube-prometheus-stack" {
		return "ServiceMonitor selects nothing or lacks monitoring.labels"
	}
	ep, err := monitorEndpoint(sm)
	if err != nil {
		return err.Error()
	}
	relabel := ep["relabelings"].([]any)[0].(map[string]any)
	mr, _ := ep["metricRelabelings"].([]any)
	got := fmt.Sprintf("%v %v %v %v %v %v %d", ep["port"], ep["path"], ep["interval"], ep["scrapeTimeout"], ep["honorLabels"], relabel["targetLabel"], len(mr))
	if want := fmt.Sprintf("%v /metrics 1m 10s true node 1", port["name"]); got != want {
		return fmt.Sprintf("ServiceMonitor endpoint %s, want %s", got, want)
	}
	return ""
}

// TestValuesSchemaRefusesBaseNames: env and extraVolumes (and their
// mounts) add to the base's, so the schema refuses each name the base's
// DaemonSet already uses, read from the render: a repeated env name or
// volume is refused by the API server only at install, or silently wins.
func TestValuesSchemaRefusesBaseNames(t *testing.T) {
	c := loadChart(t)
	validate := func(vals string) error {
		_, err := renderChart(c, namespace, valuesOf(t, vals))
		return err
	}
	pod := render(t, deployPath(t)).daemonSets[0].Spec.Template.Spec
	for _, e := range pod.Containers[0].Env {
		if validate(fmt.Sprintf(`env: [{name: %s, value: x}]`, e.Name)) == nil {
			t.Errorf("env %s accepted, but the base sets it", e.Name)
		}
	}
	for _, v := range pod.Volumes {
		if validate(fmt.Sprintf(`extraVolumes: [{name: %s, emptyDir: {}}]`, v.Name)) == nil {
			t.Errorf("extraVolumes %s accepted, but the base has that volume", v.Name)
		}
		if validate(fmt.Sprintf(`extraVolumeMounts: [{name: %s, mountPath: /x}]`, v.Name)) == nil {
			t.Errorf("extraVolumeMounts %s accepted, but the base mounts that volume", v.Name)
		}
	}
	if err := validate(`{env: [{name: X, value: x}], extraVolumes: [{name: x, emptyDir: {}}], extraVolumeMounts: [{name: x, mountPath: /x}]}`); err != nil {
		t.Errorf("new names refused: %v", err)
	}
}

// namesCheck checks that every name the chart gives follows the fullname
// want: the objects' (want, or want-<suffix> for the components'), the
// bindings' roleRefs and subjects, the DaemonSet's ServiceAccount, and the
// alerts' matchers on the DaemonSet's name; and that the selectors keep the
// base's labels.
func namesCheck(want string) func(*testing.T, []object) string {
	return func(t *testing.T, objs []object) string {
		follows := func(n string) bool { return n == want || strings.HasPrefix(n, want+"-") }
		roles := map[string]bool{}
		for _, o := range objs {
			if !follows(metaOf(o, "name")) {
				return objectKey(o) + " does not follow the fullname " + want
			}
			if kindOf(o) == "ClusterRole" {
				roles[metaOf(o, "name")] = true
			}
		}
		for _, o := range objs {
			if ref := nested(o, "roleRef"); ref != nil && !roles[fmt.Sprint(ref["name"])] {
				return fmt.Sprintf("%s binds %v, which the chart does not render", objectKey(o), ref["name"])
			}
		}
		if msg := serviceAccountCheck(want, true)(t, objs); msg != "" {
			return msg
		}
		if rule := objectOf(objs, "PrometheusRule"); rule != nil {
			data, _ := yaml.Marshal(rule)
			if !strings.Contains(string(data), `created_by_name="`+want+`"`) || (want != name && strings.Contains(string(data), `created_by_name="`+name+`"`)) {
				return "the alerts do not select the DaemonSet's pods by its name " + want
			}
		}
		ds := chartDaemonSet(t, objs)
		if ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != name {
			return fmt.Sprintf("DaemonSet selector %v lost the base's name", ds.Spec.Selector.MatchLabels)
		}
		return ""
	}
}
