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
	pod := nested(ds, "spec", "template", "spec")
	pod["tolerations"] = t.block(toYAMLBlock(".Values.tolerations"))
	for _, o := range podOptions {
		delete(pod, o.key)
		pod[t.optionalKey(o.key, ".Values."+o.value, o.block)] = ""
	}
	nested(ds, "spec")["updateStrategy"] = t.block(toYAMLBlock(".Values.updateStrategy"))
	podMeta := nested(ds, "spec", "template", "metadata")
	labels, _ := podMeta["labels"].(map[string]any)
	podMeta["labels"] = t.block(labelsBlock(labels, []string{".Values.podLabels"}))
	if _, ok := podMeta["annotations"]; ok {
		return errors.New("the pod template has annotations, which podAnnotations would replace")
	}
	podMeta[t.optionalKey("annotations", ".Values.podAnnotations", true)] = ""
	mounts, _ := c["volumeMounts"].([]any)
	for _, m := range mounts {
		if m, _ := m.(map[string]any); m["mountPath"] == root {
			m["mountPath"] = t.value(rootValue)
		}
	}
	volumes, _ := nested(ds, "spec", "template", "spec")["volumes"].([]any)
	for _, v := range volumes {
		if hp := nested(v.(map[string]any), "hostPath"); hp["path"] == root {
			hp["path"] = t.value(rootValue)
		}
	}
	return nil
}

// podOptions are the pod spec's keys that values set and that render only
// when set: each value's default is the base's setting (none for affinity
// and imagePullSecrets), and an empty value leaves the key out.
var podOptions = []struct {
	key, value string
	block      bool
}{
	{"affinity", "affinity", true},
	{"imagePullSecrets", "imagePullSecrets", true},
	{"nodeSelector", "nodeSelector", true},
	{"priorityClassName", "priorityClassName", false},
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
		{"The agent's image, as deploy/kustomization.yaml pins it: [registry/]repository, then\n" +
			"# @digest if set (the tag is then ignored), else :tag. Rancher's\n" +
			"# global.cattle.systemDefaultRegistry, when set, replaces the registry.",
			map[string]any{"image": map[string]any{"registry": registry, "repository": repo, "tag": tag, "digest": "",
				"pullPolicy": c["imagePullPolicy"]}}},
		{"Secrets (by name, in the release's namespace) for pulling the image from a private registry.",
			map[string]any{"imagePullSecrets": []any{}}},
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
		{"The agent must not be evicted before the VMs it serves.",
			map[string]any{"priorityClassName": pod["priorityClassName"]}},
		{"GOMEMLIMIT follows limits.memory, so the schema requires it; no CPU limit (throttling only delays mounts).",
			map[string]any{"resources": c["resources"]}},
		{"More `hpmount agent` flags (README section 3), e.g. --create-disk-images.",
			map[string]any{"extraArgs": []string{}}},
	}
	for _, comp := range comps {
		v := map[string]any{"enabled": false}
		comment := "deploy/" + comp.dir + "/, a kustomize Component (deploy/README.md); off as in the base."
		if comp.prometheusOperator() {
			v["labels"] = map[string]any{}
			comment += "\n# labels: more labels on its objects, e.g. release: <name> for kube-prometheus-stack."
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
