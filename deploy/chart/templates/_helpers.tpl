{{/*
The recommended labels of a Helm release, on every object and the agent's
pods, beside the base's own app.kubernetes.io/name, component and part-of.
*/}}
{{- define "hpmount.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | quote }}
{{- end -}}

{{/*
The agent's image: [registry/]repository, then @digest if set, else :tag.
Rancher's global.cattle.systemDefaultRegistry, when set, replaces
image.registry, as Rancher's own charts prefix it.
*/}}
{{- define "hpmount.image" -}}
{{- $registry := .Values.image.registry -}}
{{- with .Values.global }}{{ with .cattle }}{{ with .systemDefaultRegistry }}{{ $registry = . }}{{ end }}{{ end }}{{ end -}}
{{- $ref := .Values.image.repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $ref }}{{ end -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" $ref .Values.image.digest }}{{ else }}{{ printf "%s:%s" $ref .Values.image.tag }}{{ end -}}
{{- end -}}
