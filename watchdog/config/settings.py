"""The settings table, defined once: each row gives a setting's type, default and help; its flag
(``--window-seconds``), ``WATCHDOG_*`` environment variable and camelCase config-file key derive from its name,
so the three sources cannot drift. Pure data; :mod:`watchdog.config.loader` loads and validates.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from watchdog.core.detector import DEFAULT_MIN_SAMPLES, DEFAULT_WINDOW_S
from watchdog.core.ledger import MAX_ENTRIES as LEDGER_ENTRIES
from watchdog.core.model import DEFAULT_TARGETS, LEASE_DURATION_S, MAX_FENCED_TIMEOUT_S, Target
from watchdog.core.podpolicy import EffectivePolicy, paused_until, policy_of
from watchdog.core.taints import DEFAULT_TAINT
from watchdog.core.vocab import StallAction

SettingType = Literal["float", "int", "bool", "str", "choice"]


@dataclass(frozen=True)
class Setting:
    """One row of the settings table. ``name`` is snake_case; the flag, env var and file key derive from it."""

    name: str
    type: SettingType
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None  # a sane upper bound: a huge value is a typo, and breaks timers and sleeps
    optional: bool = False  # None allowed (and is the default)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "WATCHDOG_" + self.name.upper()

    @property
    def key(self) -> str:
        head, *rest = self.name.split("_")
        return head + "".join(part.capitalize() for part in rest)


SETTINGS: tuple[Setting, ...] = (
    Setting("kubeconfig", "str", None, "kubeconfig file; unset: in-cluster ServiceAccount, else ~/.kube/config",
            optional=True),
    Setting("context", "str", None, "kubeconfig context to use (default: the current context)", optional=True),
    Setting("dry_run", "bool", False, "observe only: emit StalledPodDryRun Events, never delete (all namespaces)"),
    Setting("window_seconds", "float", DEFAULT_WINDOW_S, "seconds a busy engine may show no progress before it is "
            "stalled", minimum=1.0, maximum=86400.0),
    Setting("min_samples", "int", DEFAULT_MIN_SAMPLES, "known busy samples needed inside the window", minimum=1,
            maximum=10000),
    Setting("count_waiting", "bool", False, "treat waiting requests as busy too (running may read 0 in a wedge)"),
    Setting("completion_only_window_seconds", "float", 0.0,
            "window for engines whose only progress signals move when a request finishes (TensorRT-LLM, old "
            "SGLang); 0: never judge them (unknown). Else >= 600 and >= windowSeconds: longer than any request",
            minimum=0.0, maximum=86400.0),
    Setting("max_pod_window_seconds", "float", 3600.0, "the longest window a pod may ask for with its annotation "
            "vllm-watchdog.io/window-seconds (which may only lengthen its target's window; a shorter, malformed or "
            "higher value is ignored with one Warning Event)", minimum=1.0, maximum=86400.0),
    Setting("max_pod_pause_seconds", "float", 3600.0, "the furthest ahead a pod's annotation "
            "vllm-watchdog.io/paused-until (an RFC 3339 time: its engines read paused until then, for pauses no "
            "metric shows) may lie; a further or malformed value is ignored with one Warning Event",
            minimum=1.0, maximum=86400.0),
    Setting("scrape_interval_seconds", "float", 15.0, "seconds between cycles (discover, scrape, detect, act)",
            minimum=1.0, maximum=86400.0),
    Setting("scrape_deadline_seconds", "float", 3.0, "total seconds one scrape may take, body included (a pod "
            "whose last 2 scrapes timed out gets 1 s, or half this when shorter, except every 4th cycle)",
            minimum=0.1, maximum=86400.0),
    Setting("connect_timeout_seconds", "float", 1.0, "TCP connect timeout of one scrape, seconds",
            minimum=0.05, maximum=86400.0),
    Setting("max_body_bytes", "int", 8 * 1024 * 1024, "largest /metrics body accepted, after gzip",
            minimum=1024, maximum=1024 ** 3),
    Setting("scrape_encoding", "choice", "identity", "what a scrape asks pods for (Accept-Encoding): identity (a "
            "plain body: no compressing in the pod, no inflating here; ~3 KB per engine, a scrape asking for the "
            "profile's series only) or gzip (for a slow or metered network to the pods); a gzip answer is inflated "
            "either way",
            choices=("identity", "gzip")),
    Setting("workers", "int", 0, "concurrent scrapes; 0: sized each cycle by the fleet (16 + the pods whose last "
            "scrape was slow or timed out, at most 768)", minimum=0, maximum=1024),
    # -- where the signals come from (docs/scaling.md "source: prometheus") --
    Setting("source", "choice", "scrape", "where the engine signals come from: scrape (GET each pod's /metrics) or "
            "prometheus (instant queries to prometheusUrl per watched namespace; removals still confirmed by the "
            "pod's own /metrics); a target's own "
            "'source' overrides it", choices=("scrape", "prometheus")),
    Setting("prometheus_url", "str", None, "base URL of the Prometheus (or Thanos/Mimir) HTTP API, e.g. "
            "http://prometheus.monitoring:9090; required when a source is prometheus", optional=True),
    Setting("prometheus_bearer_token_file", "str", None, "file holding a bearer token sent to Prometheus "
            "(re-read at every query)", optional=True),
    Setting("prometheus_username_file", "str", None, "basic auth: file holding the username sent to Prometheus "
            "(e.g. a mounted kubernetes.io/basic-auth Secret's 'username'; re-read at every query); needs "
            "prometheusPasswordFile, not with prometheusBearerTokenFile", optional=True),
    Setting("prometheus_password_file", "str", None, "basic auth: file holding the password (re-read at every "
            "query); needs prometheusUsernameFile", optional=True),
    Setting("prometheus_tenant", "str", None, "tenant sent as the X-Scope-OrgID header (Mimir, Cortex); unset: "
            "none", optional=True),
    Setting("prometheus_ca_file", "str", None, "CA bundle that verifies Prometheus' TLS certificate; unset: "
            "the system's", optional=True),
    Setting("prometheus_timeout_seconds", "float", 5.0, "total seconds a cycle's Prometheus queries may "
            "take together (4 in flight, a free slot to the tenant with the fewest in flight, one query at most "
            "half of it), answers included",
            minimum=0.1, maximum=300.0),
    Setting("prometheus_max_bytes", "int", 32 * 1024 * 1024, "largest Prometheus answer accepted, bytes",
            minimum=1024, maximum=1024 ** 3),
    Setting("prometheus_namespace_label", "str", "namespace", "the Prometheus label holding the pod's namespace"),
    Setting("prometheus_pod_label", "str", "pod", "the Prometheus label holding the pod's name"),
    Setting("prometheus_extra_matchers", "str", "", "label matchers added to every Prometheus query, e.g. "
            'cluster="prod-1" (one cluster\'s series in a multi-cluster Thanos/Mimir, where two clusters\' llama-0 '
            "would read as one pod); comma-separated name=\"value\" (=, !=, =~, !~)"),
    Setting("prometheus_instance_check", "bool", True, "a Prometheus series is evidence about a pod only when its "
            "instance label's host is the pod's IP (Kubernetes service discovery's default); turn off only where "
            "instance is relabelled (e.g. to the pod name): docs/tenancy.md"),
    Setting("prometheus_staleness_seconds", "float", 60.0, "a Prometheus series whose newest sample is older "
            "than this is unknown (about 2 Prometheus scrape intervals; at most Prometheus' 5-minute lookback delta)",
            minimum=1.0, maximum=300.0),
    Setting("jitter_seconds", "float", 1.0, "random delay added to each cycle start, seconds",
            minimum=0.0, maximum=86400.0),
    Setting("namespace_selector", "str", "", "extra label selector namespaces must match besides the opt-in label "
            "(shard a fleet across several releases, e.g. shard=a)"),
    Setting("watch_namespaces", "str", None, "namespace-only mode: the namespaces (a YAML list in the config "
            "file, comma-separated in the env var and flag; the chart's top-level value watchNamespaces) whose pods "
            "are listed and watched, each in its own namespace (Roles there, no cluster-wide pod access; a namespace "
            "must still carry the opt-in label); unset: every namespace", optional=True),
    Setting("tenant_label", "str", "", "the Namespace label naming a namespace's tenant (e.g. Capsule's "
            "capsule.clastix.io/tenant), which tenants must not be able to write on their own namespaces; the rails "
            "that count others (the fleet breaker, node escalation) count tenants. Empty, or a namespace without it: "
            "each namespace is its own tenant"),
    Setting("require_controller", "bool", True, "skip pods without a controller owner reference (bare pods)"),
    Setting("allow_loopback_pod_ips", "bool", False, "for the embedded demo and tests only: accept pod IPs in "
            "127.0.0.0/8 and ::1; never on a real cluster"),
    Setting("grace_period_seconds", "int", None, "deletion grace period, seconds; unset: the pod's own. 0 (a force "
            "delete: the pod leaves the API before its container stops, so a replacement can start while the "
            "wedged engine still holds the GPU) is refused", minimum=1, maximum=86400,
            optional=True),
    # -- safety rails (docs/safety.md) --
    Setting("paused", "bool", False, "global pause: keep watching, delete nothing (stalls are deferred)"),
    Setting("pause_config_map", "str", None, "the run-time brake: a ConfigMap in the watchdog's namespace "
            "($POD_NAMESPACE, else default) read every cycle; its annotation vllm-watchdog.io/paused=\"true\" "
            "pauses every deletion like 'paused', without a restart. Unset: no brake to read (the chart sets its "
            "own config ConfigMap)", optional=True),
    Setting("action", "choice", "delete", "how to remove a stalled pod: delete, evict (honours "
            "PodDisruptionBudgets; a blocked eviction is deferred, never turned into a delete), or quarantine "
            "(never remove: drain through the readiness gate only; needs quarantine)",
            choices=("delete", "evict", "quarantine")),
    # -- quarantine through a readiness gate (docs/safety.md) --
    Setting("quarantine", "bool", False, "maintain the readiness gate condition vllm-watchdog.io/engine-progressing "
            "on pods that declare it in spec.readinessGates: True once an engine is idle or progressing, False "
            "(out of the Services' endpoints) while one is suspect for quarantineAfterSeconds or stalled; needs "
            "pods/status patch"),
    Setting("quarantine_after_seconds", "float", 60.0, "seconds an engine may be suspect (busy, no progress) "
            "before its pod is quarantined; shorter than windowSeconds (source prometheus: only a stall a direct "
            "read confirmed quarantines)", minimum=1.0, maximum=86400.0),
    Setting("quarantine_max_owner_fraction", "float", 0.5, "never quarantine more than this fraction of one "
            "owner's pods at once (rounded down), nor its last Ready pod", minimum=0.0, maximum=1.0),
    Setting("quarantine_in_dry_run", "bool", False, "quarantine in dry-run namespaces (and under dryRun) too; off: "
            "there pods are only admitted and released"),
    # -- evidence kept before a deletion (docs/safety.md) --
    Setting("evidence_log_lines", "int", 0, "before a deletion (and in dry-run), keep this many of the last lines "
            "of the engine container's log in the evidence log record; 0: none. Needs pods/log get", minimum=0,
            maximum=500),
    Setting("evidence_log_bytes", "int", 65536, "at most this many bytes of that log tail (the newest whole "
            "lines)", minimum=1024, maximum=262144),
    Setting("max_deletions", "int", 2, "deletions allowed cluster-wide per deletionWindowSeconds (at most "
            f"{LEDGER_ENTRIES}: each one inside the window is kept in the deletion ledger)",
            minimum=1, maximum=LEDGER_ENTRIES),
    Setting("max_deletions_per_namespace", "int", 1, "deletions allowed per namespace per deletionWindowSeconds",
            minimum=1, maximum=LEDGER_ENTRIES),
    Setting("deletion_window_seconds", "float", 600.0, "rolling window of the deletion budgets, seconds",
            minimum=1.0, maximum=86400.0),
    Setting("breaker_fraction", "float", 0.3, "delete nothing while more than this fraction of the pods in "
            "enforced namespaces look stalled at once, also with any one tenant left out (one tenant's pods alone "
            "never trip it; dry-run namespaces' pods never vote; a namespace's own breaker counts all its pods, "
            "also those that cannot be judged)",
            minimum=0.0, maximum=1.0),
    Setting("breaker_min_pods", "int", 3, "the breaker trips only when at least this many pods look bad (the "
            "fleet's: also with any one tenant left out)",
            minimum=1, maximum=100000),
    Setting("breaker_cooldown_seconds", "float", 300.0, "seconds the breaker stays open after the fraction "
            "last exceeded the threshold", minimum=0.0, maximum=86400.0),
    Setting("min_pod_age_seconds", "float", None, "pods younger than this are never deleted; unset: the window",
            minimum=0.0, maximum=86400.0, optional=True),
    Setting("leader_election", "bool", False, "Lease-based leader election (needed for more than one replica)"),
    Setting("leader_election_namespace", "str", None, "namespace of the Lease; unset: $POD_NAMESPACE, else "
            "default", optional=True),
    Setting("lease_name", "str", "vllm-stall-watchdog", "name of the Lease used for leader election (and, with "
            "'-ledger' appended, of the deletion ledger ConfigMap)"),
    Setting("budget_ledger", "bool", True, "record each removal, before it is sent, in the ConfigMap "
            "<leaseName>-ledger in the watchdog's namespace ($POD_NAMESPACE, else default) and read the deletion "
            "budget back from it with one GET after a restart or a leader change; off: nothing can be read back, "
            "so every start and leader change removes nothing for one deletionWindowSeconds"),
    Setting("node_escalation", "bool", False, "taint a node after repeated stalls of different pods, of at "
            "least 2 tenants, on it"),
    Setting("node_escalation_threshold", "int", 2, "distinct stalled pods on one node that trigger the taint; "
            "they must come from at least 2 tenants (one tenant's pods, in however many namespaces, never taint a "
            "shared node)",
            minimum=2, maximum=10000),
    Setting("node_escalation_window_seconds", "float", 3600.0, "window for node_escalation_threshold, seconds",
            minimum=60.0, maximum=86400.0),
    Setting("node_taint", "str", DEFAULT_TAINT, "taint added by node escalation "
            "(key[=value]:Effect); never removed by the watchdog"),
    Setting("api_timeout_seconds", "float", 10.0, "timeout of one Kubernetes API request, seconds (at most 10 with "
            "leaderElection: a write is sent only while the Lease outlasts it)",
            minimum=0.5, maximum=300.0),
    Setting("listen_address", "str", "[::]:8080", "IP:port serving /metrics, /healthz, /readyz and /status; "
            "[::]:PORT is IPv6 and IPv4 (dual-stack; IPv4 only where the kernel has no IPv6), IPv6 hosts in brackets"),
    Setting("per_engine_metrics", "bool", False, "export vllm_watchdog_engine_seconds_without_progress{namespace,"
            "pod,target,engine}: one series per watched engine series (at most 10000, those longest without "
            "progress), removed when its pod or engine goes"),
    Setting("log_format", "choice", "json", "log format", choices=("json", "text")),
    Setting("log_level", "choice", "info", "log level", choices=("debug", "info", "warning", "error")),
)
BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
BY_KEY: Mapping[str, Setting] = {s.key: s for s in SETTINGS}
#: The settings a target may set for its own pods (each unset: the global one), validated by the same rows.
TARGET_POLICY = ("window_seconds", "min_samples", "action", "completion_only_window_seconds")
TARGET_KEYS = ("name", "podSelector", "profile", "port", "path", "metrics", "source",
               *(BY_NAME[n].key for n in TARGET_POLICY))


@dataclass(frozen=True)
class Settings:
    """The effective configuration: one typed field per row of :data:`SETTINGS` (same name, same order),
    plus ``targets`` and the start-up ``warnings`` (not errors, e.g. an unknown ``WATCHDOG_*`` variable)."""

    kubeconfig: str | None
    context: str | None
    dry_run: bool
    window_seconds: float
    min_samples: int
    count_waiting: bool
    completion_only_window_seconds: float
    max_pod_window_seconds: float
    max_pod_pause_seconds: float
    scrape_interval_seconds: float
    scrape_deadline_seconds: float
    connect_timeout_seconds: float
    max_body_bytes: int
    scrape_encoding: str
    workers: int
    source: str
    prometheus_url: str | None
    prometheus_bearer_token_file: str | None
    prometheus_username_file: str | None
    prometheus_password_file: str | None
    prometheus_tenant: str | None
    prometheus_ca_file: str | None
    prometheus_timeout_seconds: float
    prometheus_max_bytes: int
    prometheus_namespace_label: str
    prometheus_pod_label: str
    prometheus_extra_matchers: str
    prometheus_instance_check: bool
    prometheus_staleness_seconds: float
    jitter_seconds: float
    namespace_selector: str
    watch_namespaces: str | None
    tenant_label: str
    require_controller: bool
    allow_loopback_pod_ips: bool
    grace_period_seconds: int | None
    paused: bool
    pause_config_map: str | None
    action: StallAction
    quarantine: bool
    quarantine_after_seconds: float
    quarantine_max_owner_fraction: float
    quarantine_in_dry_run: bool
    evidence_log_lines: int
    evidence_log_bytes: int
    max_deletions: int
    max_deletions_per_namespace: int
    deletion_window_seconds: float
    breaker_fraction: float
    breaker_min_pods: int
    breaker_cooldown_seconds: float
    min_pod_age_seconds: float | None
    leader_election: bool
    leader_election_namespace: str | None
    lease_name: str
    budget_ledger: bool
    node_escalation: bool
    node_escalation_threshold: int
    node_escalation_window_seconds: float
    node_taint: str
    api_timeout_seconds: float
    listen_address: str
    per_engine_metrics: bool
    log_format: str
    log_level: str
    targets: tuple[Target, ...] = DEFAULT_TARGETS
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_values(cls, values: Mapping[str, Any], targets: tuple[Target, ...] = DEFAULT_TARGETS,
                    warnings: tuple[str, ...] = ()) -> Settings:
        """From setting name -> value (every row of the table; unknown names raise TypeError)."""
        return cls(**values, targets=targets, warnings=warnings)

    def source_of(self, target: Target) -> str:
        """Where ``target``'s signals come from: its own ``source``, else the global one."""
        return target.source or self.source

    @property
    def base_policy(self) -> EffectivePolicy:
        """The global stall policy (every target without its own)."""
        return EffectivePolicy(self.window_seconds, self.min_samples, self.action,
                               self.completion_only_window_seconds)

    def policy_of(self, target: Target | None, annotation: str | None = None) -> tuple[EffectivePolicy, str]:
        """The effective policy of a pod of ``target`` with the window ``annotation`` (see
        :func:`watchdog.core.podpolicy.policy_of`, the one rule) and why the annotation was ignored, or ""."""
        return policy_of(self.base_policy, target, annotation, self.max_pod_window_seconds)

    def paused_until(self, annotation: str | None, wall_now: float) -> tuple[float | None, str]:
        """Until when a pod with the pause ``annotation`` reads paused at ``wall_now`` (see
        :func:`watchdog.core.podpolicy.paused_until`, the one rule) and why the annotation was ignored, or ""."""
        return paused_until(annotation, wall_now, self.max_pod_pause_seconds)

    @property
    def namespaces_watched(self) -> tuple[str, ...] | None:
        """The namespaces of namespace-only mode (``watchNamespaces``), in order, each once; None: every one."""
        if self.watch_namespaces is None:
            return None
        return tuple(dict.fromkeys(n.strip() for n in self.watch_namespaces.split(",")))

    def values(self) -> dict[str, Any]:
        """Setting name -> value, in table order (targets and warnings left out)."""
        return {s.name: getattr(self, s.name) for s in SETTINGS}

    def summary(self) -> dict[str, Any]:
        """JSON-ready view for the start-up log line."""
        out = self.values()
        out["targets"] = [target_to_dict(t) for t in self.targets]
        return out


#: The shortest completionOnlyWindowSeconds accepted (docs/engines.md): longer than a long generation.
MIN_COMPLETION_ONLY_WINDOW_S = 600.0


@dataclass(frozen=True)
class Comparison:
    """A rule between two settings (or a setting and a number), declared once: the watchdog checks it at start-up
    (:func:`comparison_problems`, watchdog/config/loader.py) and the chart at render time (tests/chart/values_schema.py
    writes :data:`COMPARISONS` into the chart's templates/_rules.tpl, which templates/_helpers.tpl evaluates), so
    ``helm template`` refuses what the watchdog would, in the same words. ``message`` names ``{left}``/``{right}``
    (the keys, a target's own as ``targets[N].windowSeconds``), ``{lv}``/``{rv}`` (their values) and
    ``{factor}``, ``{floor}``; a target's own value of a :data:`TARGET_POLICY` setting is held to the same rule."""

    left: str  # a setting's name
    op: Literal["<", "<=", ">="]
    right: str | float  # a setting's name, or a number
    message: str
    factor: float = 1.0  # left op factor x right
    when: str | None = None  # a boolean setting: the rule holds only while it is true
    unless_zero: bool = False  # left == 0 (off) always passes
    floor: float = 0.0  # the bound is at least this (">=": left >= max(floor, factor x right))

    def holds(self, left: float, right: float) -> bool:
        bound = max(self.floor, self.factor * right)
        return left < bound if self.op == "<" else left <= bound if self.op == "<=" else left >= bound


COMPARISONS: tuple[Comparison, ...] = (
    Comparison("window_seconds", ">=", "scrape_interval_seconds", "{left} ({lv}) must be at least {factor} scrape "
               "intervals ({factor} x {rv} s): a stall needs several scrapes of evidence", factor=3.0),
    Comparison("completion_only_window_seconds", ">=", "window_seconds", "{left} ({lv}) must be 0 (off) or at "
               "least {floor} s and at least {right} ({rv}): a counter that moves only when a request finishes stays "
               "flat for as long as the longest request", unless_zero=True, floor=MIN_COMPLETION_ONLY_WINDOW_S),
    Comparison("scrape_deadline_seconds", "<", "scrape_interval_seconds",
               "{left} ({lv}) must be shorter than {right} ({rv})"),
    Comparison("jitter_seconds", "<", "scrape_interval_seconds", "{left} ({lv}) must be shorter than {right} "
               "({rv}): a later cycle start makes /healthz report stale cycles"),
    Comparison("connect_timeout_seconds", "<=", "scrape_deadline_seconds",
               "{left} ({lv}) must not exceed {right} ({rv})"),
    Comparison("quarantine_after_seconds", "<", "window_seconds", "{left} ({lv}) must be shorter than {right} "
               "({rv}): a pod is drained before it is judged stalled", when="quarantine"),
    Comparison("max_deletions_per_namespace", "<=", "max_deletions",
               "{left} ({lv}) must not exceed {right} ({rv}), the cluster-wide budget"),
    Comparison("api_timeout_seconds", "<=", MAX_FENCED_TIMEOUT_S, f"{{left}} ({{lv}}) is too long for leaderElection: "
               f"a write is sent only while the {LEASE_DURATION_S:g} s Lease outlasts it (the leadership fence), so "
               "at most {rv}", when="leader_election"),
)


def number_text(value: float) -> str:
    """A number as the problems show it, and as Go's %v shows a float64 (the chart's messages): 30, 2.5."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e21 else repr(float(value))


def comparison_problem(rule: Comparison, v: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str | None:
    """Why the settings ``v`` (name -> value) break ``rule``, or None; ``names``: what the problem calls a setting
    (default: its file key)."""
    left = float(v[rule.left])
    right = float(v[rule.right]) if isinstance(rule.right, str) else rule.right
    if (rule.when and not v[rule.when]) or (rule.unless_zero and not left) or rule.holds(left, right):
        return None
    def name(setting: str | float) -> str:
        return str(setting) if not isinstance(setting, str) else (names or {}).get(setting, BY_NAME[setting].key)
    return (rule.message.replace("{left}", name(rule.left)).replace("{right}", name(rule.right))
            .replace("{lv}", number_text(left)).replace("{rv}", number_text(right))
            .replace("{factor}", number_text(rule.factor)).replace("{floor}", number_text(rule.floor)))


def comparison_problems(v: Mapping[str, Any], names: Mapping[str, str] | None = None,
                        only: Collection[str] | None = None) -> list[str]:
    """The problems of every rule of :data:`COMPARISONS` on ``v``; ``only``: just the rules naming one of these
    settings (a target's own)."""
    return [problem for rule in COMPARISONS if only is None or rule.left in only or rule.right in only
            if (problem := comparison_problem(rule, v, names))]


def completion_window_problem(completion_s: float | None, window_s: float, name: str = "completionOnlyWindowSeconds",
                              window_name: str = "windowSeconds") -> str | None:
    """The rule of completionOnlyWindowSeconds (also of ``replay --completion-only-window``): 0/None (off), or at
    least :data:`MIN_COMPLETION_ONLY_WINDOW_S` and at least the stall window; the problem, else None."""
    v = {"completion_only_window_seconds": completion_s or 0.0, "window_seconds": window_s}
    names = {"completion_only_window_seconds": name, "window_seconds": window_name}
    problems = comparison_problems(v, names, only=("completion_only_window_seconds",))
    return problems[0] if problems else None


def quarantine_problems(v: Mapping[str, Any], action_name: str = "action") -> list[str]:
    """Action quarantine only with quarantine on (``action_name``: what the problem calls it, a target's own
    ``targets[0].action``); quarantineAfterSeconds against the window is a :data:`COMPARISONS` rule."""
    if v["action"] == "quarantine" and not v["quarantine"]:
        return [f"{action_name} quarantine needs quarantine: true (the readiness gate is its only remedy)"]
    return []


def defaults() -> Settings:
    """Every setting at its default."""
    return Settings.from_values({s.name: s.default for s in SETTINGS})


def target_to_dict(t: Target) -> dict[str, Any]:
    out: dict[str, Any] = {"name": t.name, "podSelector": t.pod_selector, "profile": t.profile, "port": t.port,
                           "path": t.path}
    if t.metrics:
        out["metrics"] = dict(t.metrics)
    if t.source is not None:
        out["source"] = t.source
    for name in TARGET_POLICY:
        if getattr(t, name) is not None:
            out[BY_NAME[name].key] = getattr(t, name)
    return out


_FIELDS = [f.name for f in fields(Settings)][: len(SETTINGS)]
if [s.name for s in SETTINGS] != _FIELDS:  # one field per row, same order: drift fails at import, not at use
    raise RuntimeError(f"Settings fields {_FIELDS} differ from the SETTINGS table")
