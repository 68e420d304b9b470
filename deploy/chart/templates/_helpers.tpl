{{/*
The name of the chart's objects, and the start of the others'
(<fullname>-volume-status): fullnameOverride; else, with nameOverride,
<release>-<nameOverride> (the release's name alone if it contains
nameOverride), Helm's usual fullname; else the base's hpmount. The
default does not follow the release's name: renaming the DaemonSet on an
upgrade would run a second agent on every node beside the first until the
old one is deleted. Labels and selectors keep the base's name, which
kubectl hpmount diag and the monitors select by.
*/}}
{{- define "hpmount.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if .Values.nameOverride -}}
{{- if contains .Values.nameOverride .Release.Name -}}
{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{ printf "%s-%s" .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- else -}}
hpmount
{{- end -}}
{{- end -}}

{{/*
The namespace of the chart's namespaced objects: namespaceOverride, else
the release's.
*/}}
{{- define "hpmount.namespace" -}}
{{ .Values.namespaceOverride | default .Release.Namespace }}
{{- end -}}

{{/*
The recommended labels of a Helm release, on every object and the agent's
pods, beside the base's own app.kubernetes.io/name, component and part-of.
Selectors never carry them: a DaemonSet's cannot change.
*/}}
{{- define "hpmount.labels" -}}
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
{{- define "hpmount.image" -}}
{{- $registry := .Values.image.registry -}}
{{- with .Values.global }}{{ with .cattle }}{{ with .systemDefaultRegistry }}{{ $registry = . }}{{ end }}{{ end }}{{ end -}}
{{- with .Values.global }}{{ with .imageRegistry }}{{ $registry = . }}{{ end }}{{ end -}}
{{- $ref := .Values.image.repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $ref }}{{ end -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" $ref .Values.image.digest }}{{ else }}{{ printf "%s:%s" $ref .Values.image.tag }}{{ end -}}
{{- end -}}

{{/*
The ServiceAccount the agent runs as and its bindings name: serviceAccount.name,
else the base's (hpmount, following fullname) when the chart creates it. Without
serviceAccount.create the operator's own is required (the schema says so too).
*/}}
{{- define "hpmount.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "hpmount.fullname" .) }}
{{- else -}}
{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}
