// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// template is one object on its way to a Helm template: fields of the
// rendered object are replaced by tokens, the object is marshalled, and each
// token is then replaced by template text. Marshalling first keeps YAML
// quoting and indentation the encoder's business.
type template struct {
	inline   map[string]string           // token → template expression
	blocks   map[string]func(int) string // token → block text for a value indented by n
	optional map[string]optionalKey      // token, as a key → the key, rendered only when set
}

// optionalKey is a key rendered only when its value is set (Helm's
// `with`), e.g. affinity: the base's object has no such key, so the chart
// must render none with the default, empty value.
type optionalKey struct {
	key, expr string
	block     bool // a map or list (toYaml), else a scalar (quote)
}

func newTemplate() *template {
	return &template{inline: map[string]string{}, blocks: map[string]func(int) string{}, optional: map[string]optionalKey{}}
}

// optionalKey returns a token to use as a key of a map in place of key,
// which becomes key: <expr> when expr is set and nothing otherwise.
func (t *template) optionalKey(key, expr string, block bool) string {
	tok := fmt.Sprintf("HPMOUNTOPT%d", len(t.optional))
	t.optional[tok] = optionalKey{key, expr, block}
	return tok
}

// value returns a token that becomes {{ expr }} in place.
func (t *template) value(expr string) string {
	tok := fmt.Sprintf("HPMOUNTVALUE%d", len(t.inline))
	t.inline[tok] = "{{ " + expr + " }}"
	return tok
}

// block returns a token that, as the value of a key, becomes text
// rendered below the key (see blockLine).
func (t *template) block(text func(indent int) string) string {
	tok := fmt.Sprintf("HPMOUNTBLOCK%d", len(t.blocks))
	t.blocks[tok] = text
	return tok
}

// toYAMLBlock is the usual Helm idiom for a whole subtree from values.
func toYAMLBlock(expr string) func(int) string {
	return func(indent int) string { return fmt.Sprintf("{{- toYaml %s | nindent %d }}", expr, indent) }
}

// braces escapes template delimiters in rendered text, e.g. the
// {{ $labels.node }} of alert annotations, which Prometheus expands.
var braces = strings.NewReplacer("{{", `{{ "{{" }}`, "}}", `{{ "}}" }}`)

// blockLine matches `key: TOKEN` or `- key: TOKEN` as the encoder writes it.
var blockLine = regexp.MustCompile(`^(\s*(?:- )?)([A-Za-z]+): (HPMOUNTBLOCK\d+)$`)

// optionalLine matches `TOKEN: placeholder` as the encoder writes an
// optional key.
var optionalLine = regexp.MustCompile(`^(\s*)(HPMOUNTOPT\d+): .*$`)

// optionalText is the template text of an optional key at indent.
func (o optionalKey) text(indent string) string {
	if o.block {
		return fmt.Sprintf("{{- with %s }}\n%s%s:\n{{- toYaml . | nindent %d }}\n{{- end }}", o.expr, indent, o.key, len(indent)+2)
	}
	return fmt.Sprintf("{{- with %s }}\n%s%s: {{ . | quote }}\n{{- end }}", o.expr, indent, o.key)
}

// text marshals obj and replaces the tokens placed in it.
func (t *template) text(obj object) (string, error) {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSuffix(braces.Replace(string(data)), "\n"), "\n")
	for i, line := range lines {
		if m := optionalLine.FindStringSubmatch(line); m != nil {
			lines[i] = t.optional[m[2]].text(m[1])
			delete(t.optional, m[2])
			continue
		}
		if m := blockLine.FindStringSubmatch(line); m != nil {
			indent := len(m[1]) + 2
			lines[i] = m[1] + m[2] + ":\n" + t.blocks[m[3]](indent)
			delete(t.blocks, m[3])
		}
	}
	out := strings.Join(lines, "\n") + "\n"
	for tok, expr := range t.inline {
		if !strings.Contains(out, tok) {
			return "", fmt.Errorf("token for %s lost in marshalling", expr)
		}
		out = strings.ReplaceAll(out, tok, expr)
	}
	if len(t.blocks) > 0 || len(t.optional) > 0 || strings.Contains(out, "HPMOUNT") {
		return "", errors.New("a block token is not the whole value of a key, or an optional key not a whole line")
	}
	return out, nil
}

// addTemplate turns one rendered object into templates/<kind>-<name>.yaml,
// wrapped in the component's `enabled` value unless it is from the base.
func addTemplate(files map[string][]byte, obj object, ns string, comps []component, value string) error {
	obj = deepCopy(obj)
	t := newTemplate()
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if _, ok := labels[dashboardLabel]; ok && value != "" && meta["namespace"] == ns {
		meta["namespace"] = t.value(".Values." + value + `.namespace | default .Release.Namespace | quote`)
	}
	templateNamespace(obj, ns, t)
	meta["labels"] = t.block(labelsBlock(labels, extraLabelsOf(obj, value)))
	if kindOf(obj) == "DaemonSet" {
		if err := templateDaemonSet(obj, t, comps); err != nil {
			return err
		}
	}
	if path, found := findString(obj, ns, ""); found {
		return fmt.Errorf("%s names namespace %q at %s, which the chart cannot move", objectKey(obj), ns, path)
	}
	body, err := t.text(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", objectKey(obj), err)
	}
	body = generatedHeader + body
	if value != "" {
		// The condition comes first so that a disabled template renders
		// nothing, not even the header.
		body = fmt.Sprintf("{{- if .Values.%s.enabled }}\n%s{{- end }}\n", value, body)
	}
	name := "templates/" + strings.ToLower(kindOf(obj)) + "-" + metaOf(obj, "name") + ".yaml"
	if _, dup := files[name]; dup {
		return fmt.Errorf("two objects would be %s", name)
	}
	files[name] = []byte(body)
	return nil
}

// templateNamespace puts the release's namespace where the base has its
// own: the object's and a binding's subjects'.
func templateNamespace(obj object, ns string, t *template) {
	if m, _ := obj["metadata"].(map[string]any); m["namespace"] == ns {
		m["namespace"] = t.value(".Release.Namespace | quote")
	}
	subjects, _ := obj["subjects"].([]any)
	for _, s := range subjects {
		if m, _ := s.(map[string]any); m["namespace"] == ns {
			m["namespace"] = t.value(".Release.Namespace | quote")
		}
	}
}

// findString reports the first path under v holding a string containing s.
func findString(v any, s, path string) (string, bool) {
	switch v := v.(type) {
	case string:
		return path, strings.Contains(v, s)
	case map[string]any:
		for k, e := range v {
			if p, ok := findString(e, s, path+"."+k); ok {
				return p, true
			}
		}
	case []any:
		for i, e := range v {
			if p, ok := findString(e, s, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	}
	return "", false
}

// The recommended labels of a Helm release, which kustomize's objects do
// not carry: every object gets them through _helpers.tpl.
const (
	helpersName  = "templates/_helpers.tpl"
	labelsHelper = "hpmount.labels"
	imageHelper  = "hpmount.image"
)

// helpersTpl is templates/_helpers.tpl: the release's labels, and the
// image reference with Rancher's system default registry.
const helpersTpl = `{{/*
The recommended labels of a Helm release, on every object and the agent's
pods, beside the base's own app.kubernetes.io/name, component and part-of.
*/}}
{{- define "` + labelsHelper + `" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | quote }}
{{- end -}}

{{/*
The agent's image: [registry/]repository, then @digest if set, else :tag.
Rancher's global.cattle.systemDefaultRegistry, when set, replaces
image.registry, as Rancher's own charts prefix it.
*/}}
{{- define "` + imageHelper + `" -}}
{{- $registry := .Values.image.registry -}}
{{- with .Values.global }}{{ with .cattle }}{{ with .systemDefaultRegistry }}{{ $registry = . }}{{ end }}{{ end }}{{ end -}}
{{- $ref := .Values.image.repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $ref }}{{ end -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" $ref .Values.image.digest }}{{ else }}{{ printf "%s:%s" $ref .Values.image.tag }}{{ end -}}
{{- end -}}
`

// dashboardLabel marks a ConfigMap Grafana's dashboard sidecar loads
// (kube-prometheus-stack's and Rancher Monitoring's default); its
// namespace is a value, since Rancher's sidecar reads only
// cattle-dashboards.
const dashboardLabel = "grafana_dashboard"

// extraLabelsOf names the values of extra labels for obj: the Prometheus
// Operator's objects take <component>.labels, which is how
// kube-prometheus-stack's release: selector finds them.
func extraLabelsOf(obj object, value string) []string {
	if value == "" || !isPrometheusOperator(obj) {
		return nil
	}
	return []string{".Values." + value + ".labels"}
}

func isPrometheusOperator(obj object) bool {
	v, _ := obj["apiVersion"].(string)
	return strings.HasPrefix(v, "monitoring.coreos.com/")
}

// labelsBlock is a labels map: the rendered object's own labels, the
// release's (labelsHelper), then each extra map of values.
func labelsBlock(labels map[string]any, extra []string) func(int) string {
	return func(indent int) string {
		pad := strings.Repeat(" ", indent)
		var lines []string
		if len(labels) > 0 {
			data, err := yaml.Marshal(labels)
			if err != nil {
				panic(fmt.Sprintf("marshal decoded labels: %v", err))
			}
			for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				lines = append(lines, pad+braces.Replace(l))
			}
		}
		lines = append(lines, fmt.Sprintf(`{{- include %q . | nindent %d }}`, labelsHelper, indent))
		for _, e := range extra {
			lines = append(lines, fmt.Sprintf("{{- with %s }}\n{{- toYaml . | nindent %d }}\n{{- end }}", e, indent))
		}
		return strings.Join(lines, "\n")
	}
}
