{{/* Names and labels shared by every template. */}}

{{- define "vllm-stall-watchdog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full object name: fullnameOverride, else the release name if it contains the chart name, else
"<release>-<chart>". Truncated to 63 characters (DNS label). */}}
{{- define "vllm-stall-watchdog.fullname" -}}
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

{{- define "vllm-stall-watchdog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-stall-watchdog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "vllm-stall-watchdog.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "vllm-stall-watchdog.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: watchdog
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "vllm-stall-watchdog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vllm-stall-watchdog.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false (name an existing ServiceAccount)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "vllm-stall-watchdog.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The watchdog's config.yaml: .Values.config with the chart-owned listenAddress; gracePeriodSeconds only
when set (null means "the pod's own"). Keys are the watchdog's config-file keys, unchanged. */}}
{{- define "vllm-stall-watchdog.configYaml" -}}
{{- $cfg := deepCopy .Values.config }}
{{- if kindIs "invalid" $cfg.gracePeriodSeconds }}
{{- $_ := unset $cfg "gracePeriodSeconds" }}
{{- end }}
{{- $_ := set $cfg "listenAddress" "0.0.0.0:8080" }}
{{- toYaml $cfg }}
{{- end }}

{{/* Fail early, with a message, on values the schema cannot express. */}}
{{- define "vllm-stall-watchdog.validate" -}}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount=%v: running more than one watchdog needs leader election, which this version does not have (two replicas would both delete the same pod and double every Event). Use replicaCount 1 (or 0 to pause)." .Values.replicaCount) }}
{{- end }}
{{- if lt (float64 .Values.config.windowSeconds) (mulf 3 .Values.config.scrapeIntervalSeconds) }}
{{- fail (printf "config.windowSeconds (%v) must be at least 3 x config.scrapeIntervalSeconds (%v): a stall needs several scrapes of evidence" .Values.config.windowSeconds .Values.config.scrapeIntervalSeconds) }}
{{- end }}
{{- if ge (float64 .Values.config.scrapeDeadlineSeconds) (float64 .Values.config.scrapeIntervalSeconds) }}
{{- fail (printf "config.scrapeDeadlineSeconds (%v) must be shorter than config.scrapeIntervalSeconds (%v)" .Values.config.scrapeDeadlineSeconds .Values.config.scrapeIntervalSeconds) }}
{{- end }}
{{- if gt (float64 .Values.config.connectTimeoutSeconds) (float64 .Values.config.scrapeDeadlineSeconds) }}
{{- fail (printf "config.connectTimeoutSeconds (%v) must not exceed config.scrapeDeadlineSeconds (%v)" .Values.config.connectTimeoutSeconds .Values.config.scrapeDeadlineSeconds) }}
{{- end }}
{{- end }}
