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

{{/* The watchdog's config.yaml: .Values.config with the chart-owned listenAddress; a null setting
(gracePeriodSeconds, minPodAgeSeconds, leaderElectionNamespace) is left out, which the watchdog reads as unset.
Keys are the watchdog's config-file keys, unchanged. */}}
{{- define "vllm-stall-watchdog.configYaml" -}}
{{- $cfg := deepCopy .Values.config }}
{{- range $key, $value := .Values.config }}
{{- if kindIs "invalid" $value }}
{{- $_ := unset $cfg $key }}
{{- end }}
{{- end }}
{{- $_ := set $cfg "listenAddress" "[::]:8080" }}
{{- toYaml $cfg }}
{{- end }}

{{/* Fail early, with a message, on values the schema cannot express: the chart's copy of the cross-setting
checks of watchdog/config/loader.py `_cross_checks` (single-setting rules such as breakerFraction <= 1 and the
nodeTaint format live in values.schema.json). tests/test_helm.py checks that the watchdog agrees. */}}
{{- define "vllm-stall-watchdog.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.config.leaderElection) }}
{{- fail (printf "replicaCount=%v is allowed only with config.leaderElection=true: without leader election every replica would delete the same wedged pod and double every Event. Set config.leaderElection=true (only the Lease holder acts), or use replicaCount 1 (0 to turn it off)." .Values.replicaCount) }}
{{- end }}
{{- if gt (int .Values.config.maxDeletionsPerNamespace) (int .Values.config.maxDeletions) }}
{{- fail (printf "config.maxDeletionsPerNamespace (%v) must not exceed config.maxDeletions (%v), the cluster-wide budget" .Values.config.maxDeletionsPerNamespace .Values.config.maxDeletions) }}
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
{{- if ge (float64 .Values.config.jitterSeconds) (float64 .Values.config.scrapeIntervalSeconds) }}
{{- fail (printf "config.jitterSeconds (%v) must be shorter than config.scrapeIntervalSeconds (%v): a longer random delay would starve /healthz and the liveness probe would restart a healthy watchdog" .Values.config.jitterSeconds .Values.config.scrapeIntervalSeconds) }}
{{- end }}
{{- end }}
