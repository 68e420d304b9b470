// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// The values the chart exposes, each one field of the base's DaemonSet (or
// a Component's `enabled`), with the base's setting as its default.

const kubeletRootFlag = "--kubelet-root="

func daemonSetOf(base []object) (object, error) {
	for _, obj := range base {
		if kindOf(obj) == "DaemonSet" {
			return obj, nil
		}
	}
	return nil, errors.New("the base renders no DaemonSet")
}

// nested walks maps along keys.
func nested(obj object, keys ...string) map[string]any {
	m := obj
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

// agentContainer is the DaemonSet's one container, the agent.
func agentContainer(ds object) (map[string]any, error) {
	containers, _ := nested(ds, "spec", "template", "spec")["containers"].([]any)
	if len(containers) != 1 {
		return nil, fmt.Errorf("DaemonSet has %d containers, the chart generator expects 1", len(containers))
	}
	c, _ := containers[0].(map[string]any)
	return c, nil
}

func kubeletRootOf(c map[string]any) (string, error) {
	for _, a := range stringList(c["args"]) {
		if root, ok := strings.CutPrefix(a, kubeletRootFlag); ok {
			return root, nil
		}
	}
	return "", errors.New("the agent has no " + kubeletRootFlag + " argument")
}

// imageOf splits the base's pinned image into registry, repository and
// tag. The registry is the first path element when it looks like a host
// (a dot or a port, or localhost), as container runtimes read it.
func imageOf(c map[string]any) (registry, repo, tag string, err error) {
	image, _ := c["image"].(string)
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image, "@") || strings.Contains(image[i:], "/") {
		return "", "", "", fmt.Errorf("image %q is not repository:tag", image)
	}
	repo, tag = image[:i], image[i+1:]
	if host, rest, ok := strings.Cut(repo, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		return host, rest, tag, nil
	}
	return "", repo, tag, nil
}

// templateDaemonSet replaces the DaemonSet's fields that values set.
func templateDaemonSet(ds object, t *template, comps []component) error {
	c, err := agentContainer(ds)
	if err != nil {
		return err
	}
	root, err := kubeletRootOf(c)
	if err != nil {
		return err
	}
	rootValue := ".Values.kubeletRoot | quote"
	c["image"] = t.value(`include "` + imageHelper + `" . | quote`)
	c["imagePullPolicy"] = t.value(".Values.image.pullPolicy | quote")
	c["resources"] = t.block(toYAMLBlock(".Values.resources"))
	c["args"] = t.block(argsBlock(stringList(c["args"]), comps))
	for _, p := range probes {
		if _, ok := c[p]; !ok {
			return fmt.Errorf("the agent has no %s, which the value's default would be", p)
		}
		c[p] = t.block(toYAMLBlock(".Values." + p))
	}
	env, _ := c["env"].([]any)
	c["env"] = t.block(listBlock(env, ".Values.env"))
	pod := nested(ds, "spec", "template", "spec")
	pod["tolerations"] = t.block(toYAMLBlock(".Values.tolerations"))
	pod["serviceAccountName"] = t.value(serviceAccountExpr)
	for _, o := range podOptions {
		delete(pod, o.key)
		pod[t.optionalKey(o.key, o.expr, o.format)] = ""
	}
	spec := nested(ds, "spec")
	spec["updateStrategy"] = t.block(toYAMLBlock(".Values.updateStrategy"))
	if _, ok := spec["revisionHistoryLimit"]; ok {
		return errors.New("the DaemonSet sets revisionHistoryLimit, which the value (default none) would replace")
	}
	spec[t.optionalKey("revisionHistoryLimit", ".Values.revisionHistoryLimit", optNumber)] = ""
	podMeta := nested(ds, "spec", "template", "metadata")
	labels, _ := podMeta["labels"].(map[string]any)
	podMeta["labels"] = t.block(labelsBlock(labels, []string{".Values.podLabels"}))
	if _, ok := podMeta["annotations"]; ok {
		return errors.New("the pod template has annotations, which podAnnotations would replace")
	}
	podMeta[t.optionalKey("annotations", ".Values.podAnnotations", optBlock)] = ""
	mounts, _ := c["volumeMounts"].([]any)
	for _, m := range mounts {
		if m, _ := m.(map[string]any); m["mountPath"] == root {
			m["mountPath"] = t.value(rootValue)
		}
	}
	c["volumeMounts"] = t.block(listBlock(mounts, ".Values.extraVolumeMounts"))
	volumes, _ := pod["volumes"].([]any)
	for _, v := range volumes {
		if hp := nested(v.(map[string]any), "hostPath"); hp["path"] == root {
			hp["path"] = t.value(rootValue)
		}
	}
	pod["volumes"] = t.block(listBlock(volumes, ".Values.extraVolumes"))
	return nil
}

// probes are the agent's probes, each a value whose default is the base's.
var probes = []string{"livenessProbe", "readinessProbe"}

// imagePullSecretsExpr merges imagePullSecrets with global.imagePullSecrets
// (an umbrella chart's or Rancher's), each Secret once.
const imagePullSecretsExpr = `concat (.Values.imagePullSecrets | default list) (.Values.global.imagePullSecrets | default list) | uniq`

// podOptions are the pod spec's keys that values set and that render only
// when set: each value's default is the base's setting (none for affinity
// and imagePullSecrets), and an empty value leaves the key out.
var podOptions = []struct {
	key, expr string
	format    optionalFormat
}{
	{"affinity", ".Values.affinity", optBlock},
	{"imagePullSecrets", imagePullSecretsExpr, optBlock},
	{"nodeSelector", ".Values.nodeSelector", optBlock},
	{"priorityClassName", ".Values.priorityClassName", optQuote},
}

// argsBlock lists the base's arguments, each Component's behind its
// `enabled`, then extraArgs.
func argsBlock(base []string, comps []component) func(int) string {
	return func(indent int) string {
		pad := strings.Repeat(" ", indent)
		var lines []string
		item := func(arg string) string {
			if root, ok := strings.CutPrefix(arg, kubeletRootFlag); ok && root != "" {
				return pad + `- {{ printf "` + kubeletRootFlag + `%s" .Values.kubeletRoot | quote }}`
			}
			s, _ := yaml.Marshal(arg)
			return pad + "- " + braces.Replace(strings.TrimSuffix(string(s), "\n"))
		}
		for _, a := range base {
			lines = append(lines, item(a))
		}
		for _, c := range comps {
			if len(c.args) == 0 {
				continue
			}
			lines = append(lines, "{{- if .Values."+c.value+".enabled }}")
			for _, a := range c.args {
				lines = append(lines, item(a))
			}
			lines = append(lines, "{{- end }}")
		}
		lines = append(lines, "{{- range .Values.extraArgs }}", pad+"- {{ . | quote }}", "{{- end }}")
		return strings.Join(lines, "\n")
	}
}

// valuesYAML writes values.yaml: the base's settings, commented.
func valuesYAML(ds object, comps []component) ([]byte, error) {
	c, err := agentContainer(ds)
	if err != nil {
		return nil, err
	}
	registry, repo, tag, err := imageOf(c)
	if err != nil {
		return nil, err
	}
	root, err := kubeletRootOf(c)
	if err != nil {
		return nil, err
	}
	pod := nested(ds, "spec", "template", "spec")
	var b strings.Builder
	b.WriteString(generatedHeader)
	b.WriteString("# Defaults are the base's settings: with them the chart renders the objects of\n" +
		"# `kustomize build deploy/` but its Namespace (deploy/README.md). values.schema.json\n" +
		"# describes and checks every key.\n")
	sections := []struct {
		comment string
		value   map[string]any
	}{
		{"Object names: fullnameOverride; else, with nameOverride, <release>-<nameOverride>; else\n" +
			"# the base's (" + metaOf(ds, "name") + "), whatever the release's name, so that an upgrade never renames the\n" +
			"# DaemonSet (two agents per node meanwhile). Other names start with it (<name>-volume-status);\n" +
			"# labels and selectors keep the base's. namespaceOverride: the objects' namespace, else the\n" +
			"# release's.",
			map[string]any{"nameOverride": "", "fullnameOverride": "", "namespaceOverride": ""}},
		{"The agent's image, as deploy/kustomization.yaml pins it: [registry/]repository, then\n" +
			"# @digest if set (the tag is then ignored), else :tag. global.imageRegistry, else Rancher's\n" +
			"# global.cattle.systemDefaultRegistry, when set, replaces the registry.",
			map[string]any{"image": map[string]any{"registry": registry, "repository": repo, "tag": tag, "digest": "",
				"pullPolicy": c["imagePullPolicy"]}}},
		{"Secrets (by name, in the chart's namespace) for pulling the image from a private registry;\n" +
			"# global.imagePullSecrets are added to them.",
			map[string]any{"imagePullSecrets": []any{}}},
		{"Values an umbrella chart (or Rancher) shares with its subcharts. imageRegistry, when set,\n" +
			"# replaces image.registry and Rancher's cattle.systemDefaultRegistry: it is chosen for this\n" +
			"# release, while Rancher passes its registry to every app. imagePullSecrets are added to\n" +
			"# imagePullSecrets, each Secret once.",
			map[string]any{"global": map[string]any{"imageRegistry": "", "imagePullSecrets": []any{}}}},
		{"The kubelet's --root-dir on the nodes: the hostPath, its mount and --kubelet-root follow it.",
			map[string]any{"kubeletRoot": root}},
		{"Every taint is tolerated: a node that can run a VM needs its agent.",
			map[string]any{"tolerations": nested(ds, "spec", "template", "spec")["tolerations"]}},
		{"Nodes the agent runs on; a node without it cannot hotplug. Replaces the base's selector.",
			map[string]any{"nodeSelector": pod["nodeSelector"]}},
		{"core/v1 Affinity of the agent pods.",
			map[string]any{"affinity": map[string]any{}}},
		{"More labels and annotations on the agent pods (the chart's own labels cannot be replaced).",
			map[string]any{"podLabels": map[string]any{}, "podAnnotations": map[string]any{}}},
		{"How the DaemonSet rolls out: mounts live in the host namespace and survive a restart.",
			map[string]any{"updateStrategy": nested(ds, "spec")["updateStrategy"]}},
		{"Old ControllerRevisions the DaemonSet keeps for rollback; null leaves Kubernetes' default (10).",
			map[string]any{"revisionHistoryLimit": nil}},
		{"More labels on every object and the agent pods, beside the chart's own (which they cannot\n" +
			"# replace); never on selectors, which cannot change after install.",
			map[string]any{"commonLabels": map[string]any{}}},
		{"The agent must not be evicted before the VMs it serves.",
			map[string]any{"priorityClassName": pod["priorityClassName"]}},
		{"GOMEMLIMIT follows limits.memory, so the schema requires it; no CPU limit (throttling only delays mounts).",
			map[string]any{"resources": c["resources"]}},
		{"More `hpmount agent` flags (README section 3), e.g. --create-disk-images.",
			map[string]any{"extraArgs": []string{}}},
		{"More core/v1 EnvVars of the agent container, after the base's NODE_NAME and GOMEMLIMIT\n" +
			"# (which the schema keeps them from repeating).",
			map[string]any{"env": []any{}}},
		{"More core/v1 Volumes of the agent pods, and VolumeMounts of its container, after the\n" +
			"# base's (whose names the schema keeps them from repeating).",
			map[string]any{"extraVolumes": []any{}, "extraVolumeMounts": []any{}}},
		{"The agent's probes, on its health port (/healthz: the process is alive; /readyz: its caches\n" +
			"# synced; neither asks the API server, agent/health.go). helm merges a setting into them;\n" +
			"# set httpGet: null to replace the handler.",
			map[string]any{"livenessProbe": c["livenessProbe"], "readinessProbe": c["readinessProbe"]}},
		{"The ServiceAccount the agent runs as. With create: false the chart creates none and the\n" +
			"# agent runs as name (then required), which must exist in the chart's namespace; else\n" +
			"# name (empty for the base's) is the one the chart creates, with annotations.",
			map[string]any{"serviceAccount": map[string]any{"create": true, "name": "", "annotations": map[string]any{}}}},
		{"With create: false the chart renders no ClusterRole or ClusterRoleBinding, the components'\n" +
			"# included: grant the ServiceAccount what deploy/rbac.yaml (and each component's rbac.yaml) does.",
			map[string]any{"rbac": map[string]any{"create": true}}},
	}
	for _, comp := range comps {
		v := map[string]any{"enabled": false}
		comment := "deploy/" + comp.dir + "/, a kustomize Component (deploy/README.md); off as in the base."
		if comp.prometheusOperator() {
			v["labels"] = map[string]any{}
			comment += "\n# labels: more labels on its objects, e.g. release: <name> for kube-prometheus-stack."
		}
		pm, err := comp.podMonitor()
		if err != nil {
			return nil, fmt.Errorf("component %s: %w", comp.dir, err)
		}
		if pm != nil {
			d, err := monitorDefaults(pm)
			if err != nil {
				return nil, fmt.Errorf("component %s: %w", comp.dir, err)
			}
			for k, val := range d {
				v[k] = val
			}
			comment += "\n# kind: PodMonitor, or ServiceMonitor (with a headless Service on the agents' metrics port)\n" +
				"# for a Prometheus that selects only ServiceMonitors. interval and scrapeTimeout are the\n" +
				"# endpoint's. honorLabels keeps the per-volume series' namespace label (the VMI's) as\n" +
				"# namespace rather than exported_namespace, so their alerts route by the tenant's namespace.\n" +
				"# relabelings and metricRelabelings follow the base's relabeling (node, which the alerts read)."
		}
		if comp.dashboard() {
			v["namespace"] = ""
			comment += "\n# namespace: where Grafana's sidecar looks (Rancher Monitoring: cattle-dashboards);\n# empty for the release's."
		}
		sections = append(sections, struct {
			comment string
			value   map[string]any
		}{comment, map[string]any{comp.value: v}})
	}
	for _, s := range sections {
		data, err := yaml.Marshal(s.value)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n# %s\n%s", s.comment, data)
	}
	return []byte(b.String()), nil
}

// chartYAML writes Chart.yaml: the chart's version follows the image tag.
func chartYAML(ds object, ns string) ([]byte, error) {
	c, err := agentContainer(ds)
	if err != nil {
		return nil, err
	}
	_, _, tag, err := imageOf(c)
	if err != nil {
		return nil, err
	}
	// kubeVersion: the namespace's Pod Security labels (deploy/namespace.yaml)
	// are enforced from Kubernetes 1.25; -0 admits vendor pre-release
	// versions such as v1.31.4-eks-xxxx. The annotations are Rancher's.
	return fmt.Appendf(nil, `%sapiVersion: v2
name: %s
description: hpmount, the node agent of KubeVirt volume hotplug (deploy/ as a Helm chart)
type: application
version: %s
appVersion: %q
kubeVersion: ">=1.25.0-0"
home: https://github.com/hpmount/hpmount
annotations:
  catalog.cattle.io/display-name: hpmount
  catalog.cattle.io/namespace: %s
  catalog.cattle.io/release-name: %s
  catalog.cattle.io/os: linux
  catalog.cattle.io/kube-version: ">=1.25.0-0"
`, generatedHeader, metaOf(ds, "name"), strings.TrimPrefix(tag, "v"), tag, ns, metaOf(ds, "name")), nil
}
