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

{{/*
REGISTRY/ferryd:TAG, with @DIGEST when the values pin one (a release's chart does): the
runtime resolves a reference with a digest by the digest alone, so the tag only informs.
*/}}
{{- define "ferry.image" -}}
{{- $repo := required "image.repository is not set: push ferry's image to your registry and set image.repository=REGISTRY/ferryd (docs/install.md, \"The release\")" .Values.image.repository }}
{{- $ref := printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- if .Values.image.digest }}{{ $ref = printf "%s@%s" $ref .Values.image.digest }}{{ end }}
{{- $ref }}
{{- end }}

{{/* Where ferryd finds its identity material inside the container. */}}
{{- define "ferry.certDir" -}}
{{- if eq .Values.identity.source "files" }}/var/lib/ferry/certs{{ else }}/etc/ferry/identity{{ end }}
{{- end }}

{{/*
The cluster CA (identity.source: cluster-ca, docs/ferry-ca.md). Its pods carry their own
app.kubernetes.io/name: the DaemonSet's selector (name + instance, immutable) must not match
them, nor the PodMonitor's.
*/}}
{{- define "ferry.caName" -}}
{{- printf "%s-ca" (include "ferry.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ferry.caSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-ca" (include "ferry.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ferry.caLabels" -}}
helm.sh/chart: {{ include "ferry.chart" . }}
{{ include "ferry.caSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: cluster-ca
app.kubernetes.io/part-of: ferry
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The name ferry-ca's serving certificate carries and ferryd verifies. */}}
{{- define "ferry.caServerName" -}}
{{- default (printf "%s.%s.svc" (include "ferry.caName" .) .Release.Namespace) .Values.identity.clusterCa.serverName }}
{{- end }}

{{/* host:port ferryd dials. */}}
{{- define "ferry.caAddress" -}}
{{- default (printf "%s.%s.svc:15012" (include "ferry.caName" .) .Release.Namespace) .Values.identity.clusterCa.address }}
{{- end }}

{{/*
Checks across values that values.schema.json cannot express. A failure stops `helm
install` and `helm template` with the message.
*/}}
{{/*
"true" when a rollout starts the new ferryd beside the old one (DaemonSet maxSurge: beta and
on by default from Kubernetes 1.22; 1.20 and 1.21 have no such field).
*/}}
{{- define "ferry.surge" -}}
{{- $surge := toString .Values.updateStrategy.maxSurge }}
{{- and .Values.handover.enabled (semverCompare ">=1.22-0" .Capabilities.KubeVersion.Version) (ne $surge "0") (ne $surge "0%") }}
{{- end }}

{{/* The folder of ferryd's readiness file: an emptyDir of the container's own. */}}
{{- define "ferry.probeDir" -}}
/run/ferry-probe
{{- end }}

{{- define "ferry.readinessFile" -}}
{{ include "ferry.probeDir" . }}/ready
{{- end }}

{{- define "ferry.validate" -}}
{{- $root := trimSuffix "/" .Values.hostPaths.bpffs }}
{{- if not (hasPrefix (printf "%s/" $root) .Values.datapath.bpffs) }}
{{- fail (printf "datapath.bpffs (%s) must be below hostPaths.bpffs (%s): only that bpffs is mounted into the pod" .Values.datapath.bpffs .Values.hostPaths.bpffs) }}
{{- end }}
{{- if and (eq .Values.identity.source "cluster-ca") (eq (include "ferry.serviceAccountName" .) (include "ferry.caName" .)) }}
{{- fail (printf "serviceAccount.name (%s) is ferry-ca's ServiceAccount: ferryd must not hold ferry-ca's grants, nor ferry-ca be taken for a node agent" (include "ferry.serviceAccountName" .)) }}
{{- end }}
{{- end }}
