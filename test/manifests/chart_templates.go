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
	inline map[string]string           // token → template expression
	blocks map[string]func(int) string // token → block text for a value indented by n
}

func newTemplate() *template {
	return &template{inline: map[string]string{}, blocks: map[string]func(int) string{}}
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

// text marshals obj and replaces the tokens placed in it.
func (t *template) text(obj object) (string, error) {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSuffix(braces.Replace(string(data)), "\n"), "\n")
	for i, line := range lines {
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
	if len(t.blocks) > 0 || strings.Contains(out, "HPMOUNT") {
		return "", errors.New("a block token is not the whole value of a key")
	}
	return out, nil
}

// addTemplate turns one rendered object into templates/<kind>-<name>.yaml,
// wrapped in the component's `enabled` value unless it is from the base.
func addTemplate(files map[string][]byte, obj object, ns string, comps []component, value string) error {
	obj = deepCopy(obj)
	t := newTemplate()
	templateNamespace(obj, ns, t)
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
