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

{{/* "true" when the chart creates its RBAC objects (rbac.create, true when unset: values of an older chart reused
by helm upgrade --reuse-values have no rbac key). "" when RBAC is managed elsewhere. */}}
{{- define "vllm-stall-watchdog.createRbac" -}}
{{- if dig "create" true (.Values.rbac | default dict) }}true{{ end }}
{{- end }}

{{/* The pod's imagePullSecrets: global.imagePullSecrets (a parent chart's), then imagePullSecrets, each entry a
Secret name or a {name: ...} object, as a YAML list of {name: ...}, each name once; "" when there is none. */}}
{{- define "vllm-stall-watchdog.imagePullSecrets" -}}
{{- $names := list }}
{{- $global := dig "imagePullSecrets" list (.Values.global | default dict) }}
{{- range concat ($global | default list) (.Values.imagePullSecrets | default list) }}
{{- $name := kindIs "string" . | ternary . "" }}
{{- if kindIs "map" . }}{{ $name = .name }}{{ end }}
{{- if and $name (not (has $name $names)) }}{{ $names = append $names $name }}{{ end }}
{{- end }}
{{- range $names }}
- name: {{ . | quote }}
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

{{/* .Values.config as the watchdog reads it, as JSON: null settings (gracePeriodSeconds, minPodAgeSeconds,
leaderElectionNamespace) left out, which the watchdog reads as unset, and the chart-owned listenAddress. A
fractional setting given by `helm --set` (which types integers only) stays the decimal string "2.5": values.schema.json
held it to the setting's bounds, and the watchdog reads a number from a string as it does from env and flags. */}}
{{- define "vllm-stall-watchdog.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- range $key, $value := .Values.config }}
{{- if kindIs "invalid" $value }}
{{- $_ := unset $cfg $key }}
{{- end }}
{{- end }}
{{- $_ := set $cfg "listenAddress" "[::]:8080" }}
{{- with .Values.watchNamespaces }}{{ $_ := set $cfg "watchNamespaces" . }}{{ end }}
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

{{/* Fail early, with a message: on chart-only values (the watchdog never sees replicaCount or the
PodDisruptionBudget) whose refusal needs more words than a schema error gives, and on settings the watchdog would
refuse at start-up that a schema cannot judge: a comparison of two settings (also a target's own value), a target
name used twice, a label selector the API server would refuse. Each rule is declared once, in
watchdog/config/settings.py: bounds, enums and the rules a schema can express are in values.schema.json, the others
in _rules.tpl (both generated: python tests/chart/values_schema.py), so `helm template` refuses them with the
watchdog's own words, the key named as it is in these values. */}}

{{- define "vllm-stall-watchdog.validate" -}}
{{- if not (hasKey .Values "podDisruptionBudget") }}
{{- fail "these values lack podDisruptionBudget, securityContexts and probes: they are an older chart's (helm upgrade --reuse-values renders a new chart with the old chart's defaults, which would drop the restricted securityContext and the probes). Upgrade once with --reset-then-reuse-values (Helm >= 3.14) or with your values given again (-f), then --reuse-values works again." }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.config.leaderElection) }}
{{- fail (printf "replicaCount=%v is allowed only with config.leaderElection=true: without leader election every replica would delete the same wedged pod and double every Event. Set config.leaderElection=true (only the Lease holder acts), or use replicaCount 1 (0 to turn it off)." .Values.replicaCount) }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (eq (kindIs "invalid" .minAvailable) (kindIs "invalid" .maxUnavailable)) }}
{{- fail "podDisruptionBudget: set exactly one of minAvailable and maxUnavailable (the other null)" }}
{{- end }}
{{- end }}
{{- include "vllm-stall-watchdog.validateSettings" . }}
{{- end }}

{{/* The rules of _rules.tpl on .Values.config: each comparison on the global values, then on each target's own
values (the global ones with the target's in their place), each problem naming the target's key and the target;
target names each once; every label selector in the API server's grammar. */}}
{{- define "vllm-stall-watchdog.validateSettings" -}}
{{- $rules := include "vllm-stall-watchdog.rules" . | fromJson }}
{{- $cfg := .Values.config }}
{{- range $rules.comparisons }}
{{- include "vllm-stall-watchdog.compare" (dict "rule" . "values" $cfg "names" dict "suffix" "") }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $target := $cfg.targets }}
{{- $name := toString $target.name }}
{{- if hasKey $seen $name }}
{{- fail (printf "config.targets: target name '%s' is used twice" $name) }}
{{- end }}
{{- $_ := set $seen $name true }}
{{- if not (regexMatch $rules.selector (toString $target.podSelector)) }}
{{- fail (printf "config.targets[%d].podSelector: '%s' is not a valid label selector (the API server would refuse every LIST with it)" $i (toString $target.podSelector)) }}
{{- end }}
{{- $merged := deepCopy $cfg }}
{{- $names := dict }}
{{- range $rules.targetKeys }}
{{- if not (kindIs "invalid" (index $target .)) }}
{{- $_ := set $merged . (index $target .) }}
{{- $_ := set $names . (printf "config.targets[%d].%s" $i .) }}
{{- end }}
{{- end }}
{{- range $rules.comparisons }}
{{- if or (hasKey $names .left) (hasKey $names (toString .right)) }}
{{- include "vllm-stall-watchdog.compare" (dict "rule" . "values" $merged "names" $names "suffix" (printf " (target '%s')" $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- range .Values.watchNamespaces }}
{{- if has . $rules.neverWatched }}
{{- fail (printf "watchNamespaces names %s, which is never watched: leave it out (its Role would grant pod deletes for nothing)" .) }}
{{- end }}
{{- end }}
{{- if not (regexMatch $rules.selector (toString $cfg.namespaceSelector)) }}
{{- fail (printf "config.namespaceSelector: '%s' is not a valid label selector (the API server would refuse every LIST with it)" (toString $cfg.namespaceSelector)) }}
{{- end }}
{{- end }}

{{/* One comparison rule (_rules.tpl) on .values: fails with the rule's message, keys named as in .names (else
config.KEY), values as the watchdog shows them. */}}
{{- define "vllm-stall-watchdog.compare" -}}
{{- $r := .rule }}
{{- $left := float64 (index .values $r.left) }}
{{- $right := kindIs "string" $r.right | ternary (index .values (toString $r.right)) $r.right | float64 }}
{{- $bound := maxf $r.floor (mulf $r.factor $right) }}
{{- $holds := ge $left $bound }}
{{- if eq $r.op "<" }}{{ $holds = lt $left $bound }}{{ else if eq $r.op "<=" }}{{ $holds = le $left $bound }}{{ end }}
{{- if and (or (not $r.when) (index .values $r.when)) (not (and $r.unlessZero (eq $left 0.0))) (not $holds) }}
{{- $leftName := get .names $r.left | default (printf "config.%s" $r.left) }}
{{- $rightName := kindIs "string" $r.right | ternary (get .names (toString $r.right) | default (printf "config.%v" $r.right)) (toString $r.right) }}
{{- fail (printf "%s%s" ($r.message | replace "{left}" $leftName | replace "{right}" $rightName | replace "{lv}" (printf "%v" $left) | replace "{rv}" (printf "%v" $right) | replace "{factor}" (printf "%v" (float64 $r.factor)) | replace "{floor}" (printf "%v" (float64 $r.floor))) .suffix) }}
{{- end }}
{{- end }}

{{/* The rules on pods, their Events and their owners: in the ClusterRole (every namespace), or with
watchNamespaces in a Role in each of those namespaces (namespace-roles.yaml). One list, rendered in either place. */}}
{{- define "vllm-stall-watchdog.podRules" -}}
{{- /* the actions in use: each target's own action (targets[].action), else the global config.action */}}
{{- $actions := list }}
{{- range .Values.config.targets }}{{ $actions = append $actions (.action | default $.Values.config.action) }}{{ end }}
{{- if not $actions }}{{ $actions = list .Values.config.action }}{{ end }}
{{- $evict := has "evict" $actions }}
{{- $delete := has "delete" $actions -}}
# Pods: list + watch by label selector (in every namespace, or in this one with watchNamespaces) for the
# discovery cache (LIST once, then WATCH; a re-LIST every 10 min or after 410 Gone), get one to re-check it just
# before acting, and (action=delete only) delete the wedged one with a UID precondition. With action=evict or quarantine there is no delete at
# all, so "never falls back to delete" holds at the API too.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"{{ if $delete }}, "delete"{{ end }}]
{{- if $evict }}
# Eviction (action=evict only): POST pods/eviction (policy/v1 Eviction, UID precondition) so the API server
# enforces PodDisruptionBudgets; a 429 refusal is deferred, never turned into a delete.
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
{{- end }}
{{- if .Values.config.quarantine }}
# Readiness gate (quarantine=true only): patch pods/status to set the one condition
# vllm-watchdog.io/engine-progressing (strategic merge by condition type, metadata.uid as precondition).
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
{{- end }}
{{- if gt (int .Values.config.evidenceLogLines) 0 }}
# Evidence (evidenceLogLines > 0 only): read the last lines of the engine container's log (bounded in lines,
# bytes and time) right before a deletion, into the watchdog's own evidence log record.
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
{{- end }}
# core/v1 Events: create StalledPodDeleted / StalledPodDryRun / StalledPodDeletionDeferred on the pod and its
# top controller (and StalledNodeTainted on a Node, in namespace default). Never read back: any tenant allowed
# to create Events could forge one, so the deletion budget is restored from the ledger only. No patch: every
# decision is a new Event.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Owner chain: pod -> ReplicaSet -> Deployment, or pod -> StatefulSet, to name the controller in the Event
# and to skip pods whose controller is gone. Read one object by name only.
- apiGroups: ["apps"]
  resources: ["replicasets", "deployments", "statefulsets"]
  verbs: ["get"]
{{- end }}
