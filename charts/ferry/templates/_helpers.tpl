{{/* Names and labels, after Helm's conventions (helm create). */}}

{{- define "ferry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ferry.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ferry.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ferry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ferry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ferry.labels" -}}
helm.sh/chart: {{ include "ferry.chart" . }}
{{ include "ferry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-proxy
app.kubernetes.io/part-of: ferry
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ferry.serviceAccountName" -}}
{{- default (include "ferry.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "ferry.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where ferryd finds its identity material inside the container. */}}
{{- define "ferry.certDir" -}}
{{- if eq .Values.identity.source "ca" }}/etc/ferry/identity{{ else }}/var/lib/ferry/certs{{ end }}
{{- end }}

{{/*
Checks across values that values.schema.json cannot express. A failure stops `helm
install` and `helm template` with the message.
*/}}
{{- define "ferry.validate" -}}
{{- $root := trimSuffix "/" .Values.hostPaths.bpffs }}
{{- if not (hasPrefix (printf "%s/" $root) .Values.datapath.bpffs) }}
{{- fail (printf "datapath.bpffs (%s) must be below hostPaths.bpffs (%s): only that bpffs is mounted into the pod" .Values.datapath.bpffs .Values.hostPaths.bpffs) }}
{{- end }}
{{- end }}
