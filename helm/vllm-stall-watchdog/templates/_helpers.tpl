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

{{/* Pod topology spread: the user's topologySpreadConstraints (each without a labelSelector gets this release's
pod labels), else, with more than one replica and no podAntiAffinity of the user's, one constraint that puts the
replicas on different nodes (a leader's node loss is what the standby covers). Nodes the pod cannot use (node
affinity, taints it does not tolerate) do not count; on a single-node cluster both replicas still schedule. */}}
{{- define "vllm-stall-watchdog.topologySpread" -}}
{{- $selector := include "vllm-stall-watchdog.selectorLabels" . | fromYaml }}
{{- if .Values.topologySpreadConstraints }}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- $out = append $out $constraint }}
{{- end }}
{{- toYaml $out }}
{{- else if and (gt (int .Values.replicaCount) 1) (not (dig "podAntiAffinity" nil .Values.affinity)) }}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: DoNotSchedule
  nodeAffinityPolicy: Honor
  nodeTaintsPolicy: Honor
  labelSelector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
{{- end }}
{{- end }}

{{/* Settings the watchdog reads as seconds or fractions, with the bounds of watchdog/config/settings.py (the
schema holds the same bounds for numbers). `helm --set` passes 2.5 as the string "2.5" (it types integers only),
so values.schema.json also accepts a decimal string for these keys; this table turns such a string into a number
and holds it to the same bounds. tests/test_chart_values.py checks it against the settings table. */}}
{{- define "vllm-stall-watchdog.fractionalSettings" -}}
windowSeconds: [1, 86400]
completionOnlyWindowSeconds: [0, 86400]
scrapeIntervalSeconds: [1, 86400]
scrapeDeadlineSeconds: [0.1, 86400]
connectTimeoutSeconds: [0.05, 86400]
prometheusTimeoutSeconds: [0.1, 300]
prometheusStalenessSeconds: [1, 300]
jitterSeconds: [0, 86400]
deletionWindowSeconds: [1, 86400]
breakerFraction: [0, 1]
breakerCooldownSeconds: [0, 86400]
minPodAgeSeconds: [0, 86400]
nodeEscalationWindowSeconds: [60, 86400]
apiTimeoutSeconds: [0.5, 300]
quarantineAfterSeconds: [1, 86400]
quarantineMaxOwnerFraction: [0, 1]
{{- end }}

{{/* .Values.config as the watchdog reads it, as JSON: decimal strings of fractional settings turned into numbers
(out of bounds: the render fails naming the key), null settings (gracePeriodSeconds, minPodAgeSeconds,
leaderElectionNamespace) left out, which the watchdog reads as unset, and the chart-owned listenAddress. */}}
{{- define "vllm-stall-watchdog.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $bounds := include "vllm-stall-watchdog.fractionalSettings" . | fromYaml }}
{{- range $key, $value := .Values.config }}
{{- if kindIs "invalid" $value }}
{{- $_ := unset $cfg $key }}
{{- else if and (hasKey $bounds $key) (kindIs "string" $value) }}
{{- $number := float64 $value }}
{{- $range := index $bounds $key }}
{{- if or (lt $number (float64 (first $range))) (gt $number (float64 (last $range))) }}
{{- fail (printf "config.%s (%s) must be between %v and %v" $key $value (first $range) (last $range)) }}
{{- end }}
{{- $_ := set $cfg $key $number }}
{{- end }}
{{- end }}
{{- $_ := set $cfg "listenAddress" "[::]:8080" }}
{{- toJson $cfg }}
{{- end }}

{{/* The watchdog's config.yaml. Keys are the watchdog's config-file keys, unchanged. */}}
{{- define "vllm-stall-watchdog.configYaml" -}}
{{- include "vllm-stall-watchdog.config" . | fromJson | toYaml }}
{{- end }}

{{/* "true" when config.source or any target's source is prometheus (the watchdog queries Prometheus). */}}
{{- define "vllm-stall-watchdog.usesPrometheus" -}}
{{- $uses := eq (toString .Values.config.source) "prometheus" }}
{{- range .Values.config.targets }}{{ if eq (toString .source) "prometheus" }}{{ $uses = true }}{{ end }}{{ end }}
{{- $uses }}
{{- end }}

{{/* Fail early, with a message, on values the schema cannot express: the chart's copy of the cross-setting
checks of watchdog/config/loader.py `_cross_checks` (single-setting rules such as breakerFraction <= 1 and the
nodeTaint format live in values.schema.json). tests/test_helm.py checks that the watchdog agrees. */}}

{{- define "vllm-stall-watchdog.validate" -}}
{{- if not (hasKey .Values "podDisruptionBudget") }}
{{- fail "these values lack podDisruptionBudget, securityContexts and probes: they are an older chart's (helm upgrade --reuse-values renders a new chart with the old chart's defaults, which would drop the restricted securityContext and the probes). Upgrade once with --reset-then-reuse-values (Helm >= 3.14) or with your values given again (-f), then --reuse-values works again." }}
{{- end }}
{{- $c := include "vllm-stall-watchdog.config" . | fromJson }}
{{- if and (gt (int .Values.replicaCount) 1) (not $c.leaderElection) }}
{{- fail (printf "replicaCount=%v is allowed only with config.leaderElection=true: without leader election every replica would delete the same wedged pod and double every Event. Set config.leaderElection=true (only the Lease holder acts), or use replicaCount 1 (0 to turn it off)." .Values.replicaCount) }}
{{- end }}
{{- if gt (int $c.maxDeletionsPerNamespace) (int $c.maxDeletions) }}
{{- fail (printf "config.maxDeletionsPerNamespace (%v) must not exceed config.maxDeletions (%v), the cluster-wide budget" $c.maxDeletionsPerNamespace $c.maxDeletions) }}
{{- end }}
{{- if lt $c.windowSeconds (mulf 3 $c.scrapeIntervalSeconds) }}
{{- fail (printf "config.windowSeconds (%v) must be at least 3 x config.scrapeIntervalSeconds (%v): a stall needs several scrapes of evidence" $c.windowSeconds $c.scrapeIntervalSeconds) }}
{{- end }}
{{- $completion := float64 (default 0 $c.completionOnlyWindowSeconds) }}
{{- if and (gt $completion 0.0) (or (lt $completion 600.0) (lt $completion (float64 $c.windowSeconds))) }}
{{- fail (printf "config.completionOnlyWindowSeconds (%v) must be 0 (off) or at least 600 s and at least config.windowSeconds (%v): a counter that moves only when a request finishes stays flat for as long as the longest request" $completion $c.windowSeconds) }}
{{- end }}
{{- if and $c.quarantine (ge (float64 $c.quarantineAfterSeconds) (float64 $c.windowSeconds)) }}
{{- fail (printf "config.quarantineAfterSeconds (%v) must be shorter than config.windowSeconds (%v): a pod is drained before it is judged stalled" $c.quarantineAfterSeconds $c.windowSeconds) }}
{{- end }}
{{- if and (eq (toString $c.action) "quarantine") (not $c.quarantine) }}
{{- fail "config.action=quarantine needs config.quarantine=true (the readiness gate is its only remedy)" }}
{{- end }}
{{- $prometheus := eq (include "vllm-stall-watchdog.usesPrometheus" .) "true" }}
{{- if and $prometheus (not $c.prometheusUrl) }}
{{- fail "config.source=prometheus (globally or on a target) needs config.prometheusUrl (e.g. http://prometheus-operated.monitoring:9090)" }}
{{- end }}
{{- if and $prometheus (ge (float64 $c.prometheusTimeoutSeconds) (float64 $c.scrapeIntervalSeconds)) }}
{{- fail (printf "config.prometheusTimeoutSeconds (%v) must be shorter than config.scrapeIntervalSeconds (%v)" $c.prometheusTimeoutSeconds $c.scrapeIntervalSeconds) }}
{{- end }}
{{- if eq (toString $c.prometheusNamespaceLabel) (toString $c.prometheusPodLabel) }}
{{- fail "config.prometheusNamespaceLabel and config.prometheusPodLabel must differ" }}
{{- end }}
{{- if ne (empty $c.prometheusUsernameFile) (empty $c.prometheusPasswordFile) }}
{{- fail "config.prometheusUsernameFile and config.prometheusPasswordFile go together (basic auth needs both)" }}
{{- end }}
{{- if and $c.prometheusUsernameFile $c.prometheusBearerTokenFile }}
{{- fail "config.prometheusBearerTokenFile and basic auth (config.prometheusUsernameFile) exclude each other: Prometheus takes one Authorization header" }}
{{- end }}
{{- if ge $c.scrapeDeadlineSeconds $c.scrapeIntervalSeconds }}
{{- fail (printf "config.scrapeDeadlineSeconds (%v) must be shorter than config.scrapeIntervalSeconds (%v)" $c.scrapeDeadlineSeconds $c.scrapeIntervalSeconds) }}
{{- end }}
{{- if gt $c.connectTimeoutSeconds $c.scrapeDeadlineSeconds }}
{{- fail (printf "config.connectTimeoutSeconds (%v) must not exceed config.scrapeDeadlineSeconds (%v)" $c.connectTimeoutSeconds $c.scrapeDeadlineSeconds) }}
{{- end }}
{{- if ge $c.jitterSeconds $c.scrapeIntervalSeconds }}
{{- fail (printf "config.jitterSeconds (%v) must be shorter than config.scrapeIntervalSeconds (%v): a longer random delay would starve /healthz and the liveness probe would restart a healthy watchdog" $c.jitterSeconds $c.scrapeIntervalSeconds) }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (eq (kindIs "invalid" .minAvailable) (kindIs "invalid" .maxUnavailable)) }}
{{- fail "podDisruptionBudget: set exactly one of minAvailable and maxUnavailable (the other null)" }}
{{- end }}
{{- end }}
{{- end }}
