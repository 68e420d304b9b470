// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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
	format    optionalFormat
}

// optionalFormat says how an optional key's value is rendered, and so when
// it counts as set.
type optionalFormat int

const (
	optQuote  optionalFormat = iota // a string, set when not empty
	optBlock                        // a map or list (toYaml), set when not empty
	optNumber                       // an integer, set unless null: 0 is a setting
)

func newTemplate() *template {
	return &template{inline: map[string]string{}, blocks: map[string]func(int) string{}, optional: map[string]optionalKey{}}
}

// optionalKey returns a token to use as a key of a map in place of key,
// which becomes key: <expr> when expr is set and nothing otherwise.
func (t *template) optionalKey(key, expr string, format optionalFormat) string {
	tok := fmt.Sprintf("HPMOUNTOPT%d", len(t.optional))
	t.optional[tok] = optionalKey{key, expr, format}
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

// optionalLine matches `TOKEN: placeholder` or `- TOKEN: placeholder` as
// the encoder writes an optional key; the encoder sorts the token first, so
// in a list item it is on the item's line.
var optionalLine = regexp.MustCompile(`^(\s*)(- )?(HPMOUNTOPT\d+): .*$`)

// optionalText is the template text of an optional key at indent.
func (o optionalKey) text(indent string) string {
	switch o.format {
	case optBlock:
		return fmt.Sprintf("{{- with %s }}\n%s%s:\n{{- toYaml . | nindent %d }}\n{{- end }}", o.expr, indent, o.key, len(indent)+2)
	case optNumber:
		// Not `with`: 0 is a setting (e.g. revisionHistoryLimit: 0), only
		// null is none.
		return fmt.Sprintf("{{- if not (kindIs \"invalid\" %s) }}\n%s%s: {{ %s | int }}\n{{- end }}", o.expr, indent, o.key, o.expr)
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
			if m[2] == "" {
				lines[i] = t.optional[m[3]].text(m[1])
			} else {
				// The first key of a list item: the dash goes on a line of
				// its own ("-" then the item's map below it, valid YAML), so
				// the item stays one whether or not the key renders.
				lines[i] = m[1] + "-\n" + t.optional[m[3]].text(m[1]+"  ")
			}
			delete(t.optional, m[3])
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

// chartContext is what every template is made with: the base's
// namespace, its name (the DaemonSet's, which other objects' names start
// with), the ServiceAccount its DaemonSet runs as, and the Components.
type chartContext struct {
	ns             string
	name           string
	serviceAccount string
	comps          []component
}

// addTemplate turns one rendered object into templates/<kind>-<name>.yaml,
// rendered only under its conditions: the Component's `enabled` unless it
// is from the base, the create switches of RBAC and the ServiceAccount, and
// any given (e.g. the monitor's kind).
func addTemplate(files map[string][]byte, obj object, cc chartContext, value string, conds ...string) error {
	obj = deepCopy(obj)
	// Named before templating, which may replace the name by a token.
	name := "templates/" + strings.ToLower(kindOf(obj)) + "-" + metaOf(obj, "name") + ".yaml"
	t := newTemplate()
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if _, ok := labels[dashboardLabel]; ok && value != "" && meta["namespace"] == cc.ns {
		meta["namespace"] = t.value(".Values." + value + `.namespace | default (include "` + namespaceHelper + `" .) | quote`)
	}
	templateNamespace(obj, cc.ns, t)
	templateServiceAccount(obj, cc, t)
	templateNames(obj, cc.name, t)
	meta["labels"] = t.block(labelsBlock(labels, extraLabelsOf(obj, value)))
	switch kindOf(obj) {
	case "DaemonSet":
		if err := templateDaemonSet(obj, t, cc.comps); err != nil {
			return err
		}
	case "PodMonitor", "ServiceMonitor":
		if err := templateMonitor(obj, t, value); err != nil {
			return fmt.Errorf("%s: %w", objectKey(obj), err)
		}
	}
	if path, found := findString(obj, cc.ns, ""); found {
		return fmt.Errorf("%s names namespace %q at %s, which the chart cannot move", objectKey(obj), cc.ns, path)
	}
	body, err := t.text(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", objectKey(obj), err)
	}
	body = generatedHeader + body
	if value != "" {
		conds = append([]string{".Values." + value + ".enabled"}, conds...)
	}
	conds = append(conds, createConditions(obj)...)
	if len(conds) > 0 {
		// The condition comes first so that a template not rendered
		// renders nothing, not even the header.
		body = fmt.Sprintf("{{- if %s }}\n%s{{- end }}\n", andOf(conds), body)
	}
	if _, dup := files[name]; dup {
		return fmt.Errorf("two objects would be %s", name)
	}
	files[name] = []byte(body)
	return nil
}

// createConditions are the create switches an object renders under:
// rbac.create for RBAC objects (every Component's too: an operator who
// manages RBAC manages all of it) and serviceAccount.create for the
// ServiceAccount.
func createConditions(obj object) []string {
	switch kindOf(obj) {
	case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		return []string{".Values.rbac.create"}
	case "ServiceAccount":
		return []string{".Values.serviceAccount.create"}
	}
	return nil
}

// andOf joins template conditions.
func andOf(conds []string) string {
	if len(conds) == 1 {
		return conds[0]
	}
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = "(" + c + ")"
	}
	return "and " + strings.Join(parts, " ")
}

// fullnameExpr is the template expression (unquoted) of an object name
// of the base that follows the release's fullname: the base's name itself,
// or a name starting with it and a dash, whose rest is kept
// (hpmount-volume-status → <fullname>-volume-status). Other names are
// not the chart's to change.
func fullnameExpr(name, base string) (string, bool) {
	if name == base {
		return `include "` + fullnameHelper + `" .`, true
	}
	if rest, ok := strings.CutPrefix(name, base+"-"); ok {
		return fmt.Sprintf(`printf "%%s-%%s" (include "%s" .) %q`, fullnameHelper, rest), true
	}
	return "", false
}

// templateNames puts the fullname in the object's name and in what names
// another object of the chart: a binding's roleRef (subjects are the
// ServiceAccount's, templateServiceAccount), and an alert's label matcher
// on the DaemonSet's name.
func templateNames(obj object, base string, t *template) {
	meta := nested(obj, "metadata")
	if name, _ := meta["name"].(string); name != "" {
		if expr, ok := fullnameExpr(name, base); ok {
			meta["name"] = t.value(expr + " | quote")
		}
	}
	if ref := nested(obj, "roleRef"); ref != nil {
		if name, _ := ref["name"].(string); name != "" {
			if expr, ok := fullnameExpr(name, base); ok {
				ref["name"] = t.value(expr + " | quote")
			}
		}
	}
	if kindOf(obj) == "PrometheusRule" {
		templateRuleNames(obj, base, t)
	}
}

// workloadMatchers are the label matchers of kube-state-metrics series that
// name the agent's DaemonSet (e.g. HpmountAgentNotReady's
// kube_pod_info{created_by_name="hpmount"}), which must follow its name.
var workloadMatchers = []string{"created_by_name", "daemonset"}

// templateRuleNames puts the fullname in the alerts' matchers on the
// DaemonSet's name.
func templateRuleNames(obj object, base string, t *template) {
	groups, _ := nested(obj, "spec")["groups"].([]any)
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			expr, _ := rule["expr"].(string)
			for _, label := range workloadMatchers {
				matcher := label + `="` + base + `"`
				if strings.Contains(expr, matcher) {
					expr = strings.ReplaceAll(expr, matcher, label+`="`+t.value(`include "`+fullnameHelper+`" .`)+`"`)
				}
			}
			if expr != "" {
				rule["expr"] = expr
			}
		}
	}
}

// serviceAccountExpr is the name of the ServiceAccount the agent runs as
// (helper serviceAccountHelper).
const serviceAccountExpr = `include "` + serviceAccountHelper + `" . | quote`

// templateServiceAccount puts serviceAccount.name wherever the base names
// the agent's ServiceAccount: the ServiceAccount itself and the subjects
// of bindings (the DaemonSet's is templateDaemonSet's).
func templateServiceAccount(obj object, cc chartContext, t *template) {
	if kindOf(obj) == "ServiceAccount" && metaOf(obj, "name") == cc.serviceAccount {
		meta := nested(obj, "metadata")
		meta["name"] = t.value(serviceAccountExpr)
		if _, ok := meta["annotations"]; !ok {
			meta[t.optionalKey("annotations", ".Values.serviceAccount.annotations", optBlock)] = ""
		}
	}
	subjects, _ := obj["subjects"].([]any)
	for _, s := range subjects {
		if m, _ := s.(map[string]any); m["kind"] == "ServiceAccount" && m["name"] == cc.serviceAccount {
			m["name"] = t.value(serviceAccountExpr)
		}
	}
}

// namespaceExpr is the chart's namespace: namespaceOverride, else the
// release's.
const namespaceExpr = `include "` + namespaceHelper + `" . | quote`

// templateNamespace puts the chart's namespace where the base has its
// own: the object's and a binding's subjects'.
func templateNamespace(obj object, ns string, t *template) {
	if m, _ := obj["metadata"].(map[string]any); m["namespace"] == ns {
		m["namespace"] = t.value(namespaceExpr)
	}
	subjects, _ := obj["subjects"].([]any)
	for _, s := range subjects {
		if m, _ := s.(map[string]any); m["namespace"] == ns {
			m["namespace"] = t.value(namespaceExpr)
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

// The helpers of templates/_helpers.tpl.
const (
	helpersName          = "templates/_helpers.tpl"
	labelsHelper         = "hpmount.labels"
	imageHelper          = "hpmount.image"
	serviceAccountHelper = "hpmount.serviceAccountName"
	fullnameHelper       = "hpmount.fullname"
	namespaceHelper      = "hpmount.namespace"
)

// helpersTpl is templates/_helpers.tpl: the fullname, whose default is the
// base's name, the namespace, the release's labels, the image reference
// with the global registries, and the ServiceAccount's name, whose default
// is the base's (sa), following the fullname if the base's does.
func helpersTpl(base, sa string) string {
	saDefault := strconv.Quote(sa)
	if expr, ok := fullnameExpr(sa, base); ok {
		saDefault = "(" + expr + ")"
	}
	return `{{/*
The name of the chart's objects, and the start of the others'
(<fullname>-volume-status): fullnameOverride; else, with nameOverride,
<release>-<nameOverride> (the release's name alone if it contains
nameOverride), Helm's usual fullname; else the base's ` + base + `. The
default does not follow the release's name: renaming the DaemonSet on an
upgrade would run a second agent on every node beside the first until the
old one is deleted. Labels and selectors keep the base's name, which
kubectl hpmount diag and the monitors select by.
*/}}
{{- define "` + fullnameHelper + `" -}}
{{- if .Values.fullnameOverride -}}
{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if .Values.nameOverride -}}
{{- if contains .Values.nameOverride .Release.Name -}}
{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{ printf "%s-%s" .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- else -}}
` + base + `
{{- end -}}
{{- end -}}

{{/*
The namespace of the chart's namespaced objects: namespaceOverride, else
the release's.
*/}}
{{- define "` + namespaceHelper + `" -}}
{{ .Values.namespaceOverride | default .Release.Namespace }}
{{- end -}}

{{/*
The recommended labels of a Helm release, on every object and the agent's
pods, beside the base's own app.kubernetes.io/name, component and part-of.
Selectors never carry them: a DaemonSet's cannot change.
*/}}
{{- define "` + labelsHelper + `" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | quote }}
{{- end -}}

{{/*
The agent's image: [registry/]repository, then @digest if set, else :tag.
The registry is the first set of global.imageRegistry (this release's
operator or umbrella chart chose it), Rancher's
global.cattle.systemDefaultRegistry (which Rancher passes to every app it
installs, as its own charts prefix it) and image.registry.
*/}}
{{- define "` + imageHelper + `" -}}
{{- $registry := .Values.image.registry -}}
{{- with .Values.global }}{{ with .cattle }}{{ with .systemDefaultRegistry }}{{ $registry = . }}{{ end }}{{ end }}{{ end -}}
{{- with .Values.global }}{{ with .imageRegistry }}{{ $registry = . }}{{ end }}{{ end -}}
{{- $ref := .Values.image.repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $ref }}{{ end -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" $ref .Values.image.digest }}{{ else }}{{ printf "%s:%s" $ref .Values.image.tag }}{{ end -}}
{{- end -}}

{{/*
The ServiceAccount the agent runs as and its bindings name: serviceAccount.name,
else the base's (` + sa + `, following fullname) when the chart creates it. Without
serviceAccount.create the operator's own is required (the schema says so too).
*/}}
{{- define "` + serviceAccountHelper + `" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default ` + saDefault + ` }}
{{- else -}}
{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}
`
}

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

// commonLabels is the value of labels on every object and the agent pods.
const commonLabels = ".Values.commonLabels"

// labelsBlock is a labels map: the rendered object's own labels, the
// release's (labelsHelper), then the extra maps of values and
// commonLabels, merged so that a key in two of them is given once (the
// first's wins: podLabels over commonLabels). The schema refuses the
// chart's own keys in all of them.
func labelsBlock(labels map[string]any, extra []string) func(int) string {
	extra = append(slices.Clone(extra), commonLabels)
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
		expr := extra[0]
		if len(extra) > 1 {
			maps := make([]string, len(extra))
			for i, e := range extra {
				maps[i] = "(" + e + " | default dict)"
			}
			expr = "merge (dict) " + strings.Join(maps, " ")
		}
		lines = append(lines, fmt.Sprintf("{{- with %s }}\n{{- toYaml . | nindent %d }}\n{{- end }}", expr, indent))
		return strings.Join(lines, "\n")
	}
}

// listBlock is a list: the rendered object's own items, then the items of
// a list value (extra), e.g. the base's env, then the operator's.
func listBlock(items []any, extra string) func(int) string {
	return func(indent int) string {
		pad := strings.Repeat(" ", indent)
		var lines []string
		if len(items) > 0 {
			data, err := yaml.Marshal(items)
			if err != nil {
				panic(fmt.Sprintf("marshal decoded items: %v", err))
			}
			for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				lines = append(lines, pad+braces.Replace(l))
			}
		}
		lines = append(lines, fmt.Sprintf("{{- with %s }}\n{{- toYaml . | nindent %d }}\n{{- end }}", extra, indent))
		return strings.Join(lines, "\n")
	}
}
