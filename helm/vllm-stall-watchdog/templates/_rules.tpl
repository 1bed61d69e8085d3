{{- /* Generated from watchdog/config/settings.py (COMPARISONS, TARGET_POLICY) and the label selector grammar of
watchdog/config/selectors.py by tests/chart/values_schema.py: edit those and run it. Evaluated by "vllm-stall-watchdog.validate". */}}
{{- define "vllm-stall-watchdog.rules" -}}
{
 "comparisons": [
  {
   "left": "windowSeconds",
   "op": ">=",
   "right": "scrapeIntervalSeconds",
   "message": "{left} ({lv}) must be at least {factor} scrape intervals ({factor} x {rv} s): a stall needs several scrapes of evidence",
   "factor": 3.0,
   "floor": 0.0,
   "when": "",
   "unlessZero": false
  },
  {
   "left": "completionOnlyWindowSeconds",
   "op": ">=",
   "right": "windowSeconds",
   "message": "{left} ({lv}) must be 0 (off) or at least {floor} s and at least {right} ({rv}): a counter that moves only when a request finishes stays flat for as long as the longest request",
   "factor": 1.0,
   "floor": 600.0,
   "when": "",
   "unlessZero": true
  },
  {
   "left": "scrapeDeadlineSeconds",
   "op": "<",
   "right": "scrapeIntervalSeconds",
   "message": "{left} ({lv}) must be shorter than {right} ({rv})",
   "factor": 1.0,
   "floor": 0.0,
   "when": "",
   "unlessZero": false
  },
  {
   "left": "jitterSeconds",
   "op": "<",
   "right": "scrapeIntervalSeconds",
   "message": "{left} ({lv}) must be shorter than {right} ({rv}): a later cycle start makes /healthz report stale cycles",
   "factor": 1.0,
   "floor": 0.0,
   "when": "",
   "unlessZero": false
  },
  {
   "left": "connectTimeoutSeconds",
   "op": "<=",
   "right": "scrapeDeadlineSeconds",
   "message": "{left} ({lv}) must not exceed {right} ({rv})",
   "factor": 1.0,
   "floor": 0.0,
   "when": "",
   "unlessZero": false
  },
  {
   "left": "quarantineAfterSeconds",
   "op": "<",
   "right": "windowSeconds",
   "message": "{left} ({lv}) must be shorter than {right} ({rv}): a pod is drained before it is judged stalled",
   "factor": 1.0,
   "floor": 0.0,
   "when": "quarantine",
   "unlessZero": false
  },
  {
   "left": "maxDeletionsPerNamespace",
   "op": "<=",
   "right": "maxDeletions",
   "message": "{left} ({lv}) must not exceed {right} ({rv}), the cluster-wide budget",
   "factor": 1.0,
   "floor": 0.0,
   "when": "",
   "unlessZero": false
  },
  {
   "left": "apiTimeoutSeconds",
   "op": "<=",
   "right": 10.0,
   "message": "{left} ({lv}) is too long for leaderElection: a write is sent only while the 15 s Lease outlasts it (the leadership fence), so at most {rv}",
   "factor": 1.0,
   "floor": 0.0,
   "when": "leaderElection",
   "unlessZero": false
  }
 ],
 "targetKeys": [
  "windowSeconds",
  "minSamples",
  "action",
  "completionOnlyWindowSeconds"
 ],
 "neverWatched": [
  "kube-system"
 ],
 "selector": "^[\\t\\n\\v\\f\\r ]*(?:(?:![\\t\\n\\v\\f\\r ]*(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(?:[\\t\\n\\v\\f\\r ]*(?:==?|!=)(?:[\\t\\n\\v\\f\\r ]*[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?|[\\t\\n\\v\\f\\r ]+(?:not)?in[\\t\\n\\v\\f\\r ]*\\([\\t\\n\\v\\f\\r ]*(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|,(?:[\\t\\n\\v\\f\\r ]*[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)(?:[\\t\\n\\v\\f\\r ]*,(?:[\\t\\n\\v\\f\\r ]*[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)*[\\t\\n\\v\\f\\r ]*\\))?)(?:[\\t\\n\\v\\f\\r ]*,[\\t\\n\\v\\f\\r ]*(?:![\\t\\n\\v\\f\\r ]*(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(?:[\\t\\n\\v\\f\\r ]*(?:==?|!=)(?:[\\t\\n\\v\\f\\r ]*[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?|[\\t\\n\\v\\f\\r ]+(?:not)?in[\\t\\n\\v\\f\\r ]*\\([\\t\\n\\v\\f\\r ]*(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|,(?:[\\t\\n\\v\\f\\r ]*[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)(?:[\\t\\n\\v\\f\\r ]*,(?:[\\t\\n\\v\\f\\r ]*[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)*[\\t\\n\\v\\f\\r ]*\\))?))*[\\t\\n\\v\\f\\r ]*)?$"
}
{{- end }}
