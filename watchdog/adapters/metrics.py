"""The watchdog's own Prometheus metrics (served on ``/metrics`` of its listen address).

All live in their own registry, not the process-global default registry, so tests and the benchmark can build
several watchdogs in one process without clashes (:func:`new_metrics`). The registry also carries
prometheus_client's process collector (``process_*``: CPU, memory, open files, start time) and a
``vllm_watchdog_build_info`` gauge. No ``*_created`` series are exported (prometheus_client's
``disable_created_metrics``, process-wide): they double the series count and no alert reads them.

Per-workload series: the stall, removal, remediation, deferral, quarantine and engine-state metrics carry
``namespace`` (the LLM pod's namespace, not the watchdog's) and ``target`` (the config target's name).
:meth:`Metrics.watch_workloads` is told every cycle which (namespace, target) pairs are watched (the opted-in,
watched namespaces x the configured targets): a new pair's label values are pre-created at 0 (``increase()`` sees
its first event), a pair no longer watched loses every series (none is left at its last value). So these metrics
hold at most :data:`SERIES_PER_WORKLOAD` series per watched pair. The opt-in per-engine gauge
(``perEngineMetrics``) holds one series per engine series watched, at most :data:`MAX_ENGINE_SERIES` shared out
per tenant (:meth:`Metrics.publish_engines`: a series of a pod or engine that is gone is removed).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)

from watchdog import __version__
from watchdog.core.sourcehealth import FAILED_CYCLES
from watchdog.core.vocab import (
    DEFERRAL_RULES,
    ENGINE_STATES,
    QUARANTINE_CHANGES,
    QUARANTINE_HOLDS,
    REMEDIATION_RESULTS,
    SCRAPE_OUTCOMES,
    RemovalAction,
)

REMOVAL_ACTIONS: tuple[RemovalAction, ...] = get_args(RemovalAction)  # of vllm_watchdog_deletions_total{action}
API_AUTH_STATUSES = ("401", "403")  # of vllm_watchdog_api_auth_failures_total{status}: the refusals, no other
WORKLOAD = ("namespace", "target")  # the LLM pod's namespace and its config target's name
#: Series of the per-workload metrics per watched (namespace, target) pair: engines (6 states), stalls (1),
#: deletions (2 actions), remediations (8 results), deferrals (12 rules), quarantined (1), quarantine changes (3),
#: quarantine held (6).
SERIES_PER_WORKLOAD = (len(ENGINE_STATES) + 1 + len(REMOVAL_ACTIONS) + len(REMEDIATION_RESULTS) + len(DEFERRAL_RULES)
                       + 1 + len(QUARANTINE_CHANGES) + len(QUARANTINE_HOLDS))
#: The per-engine gauge's global cap (perEngineMetrics): the largest fleet measured (docs/scaling.md: 10,000 engine
#: series) at about 150 bytes a series is a 1.5 MB /metrics body more per scrape; beyond it the engines longest
#: without progress are kept (the ones a "suspect now" view needs). Per pod: MAX_SERIES_PER_POD (controller/state.py).
MAX_ENGINE_SERIES = 10_000
Workload = tuple[str, str]  # (namespace, target)
EngineSeries = tuple[str, str, str, str]  # (namespace, pod, target, engine)


@dataclass(frozen=True)
class Metrics:
    """Handles on every metric; docs/metrics.md says what each means."""

    registry: CollectorRegistry
    pods_watched: Gauge
    scrapes: Counter
    engines: Gauge
    stalls: Counter
    deletions: Counter  # {action}: pods removed, as the deletion budget counts them
    remediations: Counter  # {result}: every remediation attempt's outcome; deferred once per held stall episode
    cycle_duration: Histogram
    last_cycle: Gauge
    event_failures: Counter
    series_dropped: Counter
    cycle_failures: Counter
    deferrals: Counter  # {rule}: once per stall episode and rule
    breaker_open: Gauge
    leader: Gauge
    clock_skew: Gauge  # this replica's wall clock minus the API server's (seconds)
    paused: Gauge
    build_info: Gauge
    quarantined: Gauge  # gated pods whose readiness gate is False (this replica's view, leader only)
    quarantine_changes: Counter  # {to}: admitted | quarantined | released
    quarantine_held: Counter  # {rule}: wanted drains held back by a rail, once per pod and rule
    api_auth_failures: Counter  # {status}: API answers refusing the watchdog's credentials (401, 403)
    api_refused: Gauge  # 1 while the API server refuses the credentials (/readyz fails for it)
    source_up: Gauge  # {source}: 0 while a source has read no pod for FAILED_CYCLES cycles (/readyz fails for it)
    source_failed_cycles: Gauge  # {source}: its failed cycles in a row (core/sourcehealth.py)
    engine_progress: Gauge  # {namespace,pod,target,engine}: seconds without progress (perEngineMetrics only)
    namespace_unreadable: Gauge  # {namespace}: 1 while a watched namespace's pods cannot be listed (watchNamespaces)
    targets_overlap: Gauge  # {outcome}: pods several differing targets match (judged by one, or conflict)
    workloads: set[Workload] = field(default_factory=set)  # the (namespace, target) pairs with series
    engine_series: set[EngineSeries] = field(default_factory=set)  # the per-engine gauge's series
    unreadable_series: set[tuple[str]] = field(default_factory=set)  # the namespace_unreadable gauge's series

    def _per_workload(self) -> tuple[tuple[Counter | Gauge, tuple[tuple[str, ...], ...]], ...]:
        """Each per-workload metric with the values of its own labels before (namespace, target)."""
        return ((self.engines, tuple((s,) for s in ENGINE_STATES)), (self.stalls, ((),)),
                (self.deletions, tuple((a,) for a in REMOVAL_ACTIONS)),
                (self.remediations, tuple((r,) for r in REMEDIATION_RESULTS)),
                (self.deferrals, tuple((r,) for r in DEFERRAL_RULES)), (self.quarantined, ((),)),
                (self.quarantine_changes, tuple((c,) for c in QUARANTINE_CHANGES)),
                (self.quarantine_held, tuple((h,) for h in QUARANTINE_HOLDS)))

    def watch_workloads(self, watched: Iterable[Workload]) -> None:
        """The (namespace, target) pairs watched now: a new one's series are created at 0, and every series of a
        pair not watched (also one labelled outside this list, e.g. by a late removal's answer) is removed."""
        pairs = set(watched)
        for metric, values in self._per_workload():
            for labels in {tuple(s.labels.values()) for f in metric.collect() for s in f.samples}:  # each series now
                if labels[-2:] not in pairs:
                    metric.remove(*labels)
            for pair in pairs - self.workloads:
                for own in values:
                    metric.labels(*own, *pair)
        self.workloads.clear()
        self.workloads.update(pairs)

    def set_per_workload(self, gauge: Gauge, counts: Mapping[Any, float],
                         values: Iterable[tuple[str, ...]] = ((),)) -> None:
        """Set ``gauge`` (engines or quarantined) of every watched pair: ``counts`` by (own labels..., namespace,
        target), 0 where it has none; a count of a pair not watched is not published."""
        own = tuple(values)
        for pair in self.workloads:
            for labels in own:
                gauge.labels(*labels, *pair).set(counts.get((*labels, *pair), 0))

    def publish_engines(self, values: Mapping[EngineSeries, float], tenants: Mapping[str, str]) -> int:
        """The per-engine gauge: ``values`` by (namespace, pod, target, engine); at most MAX_ENGINE_SERIES of them,
        shared out per tenant (``tenants``: namespace -> its tenant; a namespace not in it is its own): each
        tenant's n-th longest without progress before any tenant's n+1-th, so one tenant's thousands of frozen
        engines, in however many namespaces, never push another tenant's out (ties by value, then labels); every
        other series removed. Returns how many were left out by the cap."""
        rank: dict[EngineSeries, int] = {}
        seen: dict[str, int] = {}
        for series, _ in sorted(values.items(), key=lambda kv: (-kv[1], kv[0])):
            tenant = tenants.get(series[0], series[0])
            rank[series] = seen[tenant] = seen.get(tenant, -1) + 1
        kept = dict(sorted(values.items(), key=lambda kv: (rank[kv[0]], -kv[1], kv[0]))[:MAX_ENGINE_SERIES])
        _set_exactly(self.engine_progress, self.engine_series, kept)
        return len(values) - len(kept)

    def namespaces_unreadable(self, unreadable: Mapping[str, bool]) -> None:
        """``vllm_watchdog_namespace_unreadable``: 1 or 0 for each namespace of ``unreadable``, no series for any
        other (a namespace no longer watched loses its series)."""
        _set_exactly(self.namespace_unreadable, self.unreadable_series,
                     {(namespace,): float(flag) for namespace, flag in unreadable.items()})

    def on_credentials(self, status: int | None, refused: bool) -> None:
        """Listener of :class:`watchdog.adapters.kubeauth.Credentials`: a refusal (its status) or a change."""
        if status is not None:
            self.api_auth_failures.labels(str(status)).inc()
        self.api_refused.set(int(refused))


def _set_exactly(gauge: Gauge, known: set[Any], values: Mapping[Any, float]) -> None:
    """Make ``gauge``'s series exactly ``values`` (label values -> value): those it had (``known``, kept up to
    date here) and has no more are removed."""
    for labels in known - set(values):
        gauge.remove(*labels)
    for labels, value in values.items():
        gauge.labels(*labels).set(value)
    known.clear()
    known.update(values)


def new_metrics() -> Metrics:
    """A fresh registry with every metric registered, label values pre-created at 0."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client 0.26
    r = CollectorRegistry()
    m = Metrics(
        registry=r,
        pods_watched=Gauge("vllm_watchdog_pods_watched", "Pods scraped in the last cycle.", registry=r),
        scrapes=Counter("vllm_watchdog_scrapes", "Scrapes of pod /metrics by outcome.", ["outcome"], registry=r),
        engines=Gauge("vllm_watchdog_engines", "Engine series by detector state after the last cycle; a pod with "
                      "no engine series known (its scrape failed, or its body has none) is one unknown engine.",
                      ["state", *WORKLOAD], registry=r),
        stalls=Counter("vllm_watchdog_stalls", "Stall episodes: an engine series entering the stalled state.",
                       WORKLOAD, registry=r),
        deletions=Counter("vllm_watchdog_deletions", "Pods removed (delete or evict), as the deletion budget "
                          "counts them: a removal whose answer was lost is charged and counted too.",
                          ["action", *WORKLOAD], registry=r),
        remediations=Counter("vllm_watchdog_remediations", "Remediation attempts by outcome; a stall held back by "
                             "a safety rail counts as deferred once per stall episode, not once per cycle.",
                             ["result", *WORKLOAD], registry=r),
        cycle_duration=Histogram("vllm_watchdog_cycle_duration_seconds", "Wall time of one cycle, seconds.",
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30), registry=r),
        last_cycle=Gauge("vllm_watchdog_last_cycle_timestamp_seconds", "Unix time the last cycle completed.",
                         registry=r),
        event_failures=Counter("vllm_watchdog_event_failures", "Kubernetes Events that could not be created.",
                               registry=r),
        series_dropped=Counter("vllm_watchdog_series_dropped", "Engine series not watched: beyond the cap per "
                               "scrape body or per pod (a pod exporting ever new label values).", registry=r),
        cycle_failures=Counter("vllm_watchdog_cycle_failures", "Cycles that ended in an error (logged).",
                               registry=r),
        deferrals=Counter("vllm_watchdog_deferrals", "Stall episodes held back by a safety rail, once per episode "
                          "and rule.", ["rule", *WORKLOAD], registry=r),
        breaker_open=Gauge("vllm_watchdog_breaker_open", "1 while the mass-stall breaker is open.", registry=r),
        leader=Gauge("vllm_watchdog_leader", "1 while this replica may act (holds the Lease, or no election).",
                     registry=r),
        clock_skew=Gauge("vllm_watchdog_clock_skew_seconds", "This replica's wall clock minus the Kubernetes API "
                         "server's (its answers' Date), as of the last cycle; the deletion ledger keeps the "
                         "server's clock.", registry=r),
        paused=Gauge("vllm_watchdog_paused", "1 while deletions are paused: the run-time brake annotation, the "
                     "paused setting, or a brake not read yet.", registry=r),
        build_info=Gauge("vllm_watchdog_build_info", "Always 1; the labels say which build runs.",
                         ["version", "python_version"], registry=r),
        quarantined=Gauge("vllm_watchdog_quarantined", "Gated pods whose readiness gate condition is False after "
                          "the last cycle (out of their Services' endpoints); 0 on a standby replica.", WORKLOAD,
                          registry=r),
        quarantine_changes=Counter("vllm_watchdog_quarantine_changes", "Readiness gate condition writes by the "
                                   "state written to: admitted (first True), quarantined (False), released (True "
                                   "again).", ["to", *WORKLOAD], registry=r),
        quarantine_held=Counter("vllm_watchdog_quarantine_held", "Wanted quarantines held back by a rail, once per "
                                "pod and rule.", ["rule", *WORKLOAD], registry=r),
        api_auth_failures=Counter("vllm_watchdog_api_auth_failures", "Kubernetes API answers refusing the "
                                  "watchdog's credentials, by HTTP status: 401 (token not accepted), 403 (RBAC).",
                                  ["status"], registry=r),
        api_refused=Gauge("vllm_watchdog_api_credentials_refused", "1 while the Kubernetes API server refuses the "
                          "watchdog's credentials: its last 3 answers were 401 or 403, none accepted since "
                          "(/readyz fails and names it).", registry=r),
        source_up=Gauge("vllm_watchdog_source_up", "0 while a source (prometheus, or scrape: every scrape "
                        f"together) has read no pod for {FAILED_CYCLES} cycles in a row although pods were due "
                        "(/readyz fails and names it); 1 otherwise. Only the sources in use have a series.",
                        ["source"], registry=r),
        source_failed_cycles=Gauge("vllm_watchdog_source_failed_cycles", "Cycles in a row in which a source read "
                                   "none of its due pods (every Prometheus query, or every scrape failed at the "
                                   "transport); 0 after a cycle that read one.", ["source"], registry=r),
        engine_progress=Gauge("vllm_watchdog_engine_seconds_without_progress", "Seconds an engine series has been "
                              "busy without progress (0 while idle, progressing or unknown), per engine series of "
                              "each watched pod; only with perEngineMetrics, at most "
                              f"{MAX_ENGINE_SERIES} series (those longest without progress).",
                              ["namespace", "pod", "target", "engine"], registry=r),
        namespace_unreadable=Gauge("vllm_watchdog_namespace_unreadable", "Namespace-only mode (watchNamespaces): 1 "
                                   "while the pods of this watched, opted-in namespace cannot be listed (RBAC 403, "
                                   "cache not synced or stale), so they are unknown; 0 while they are listed.",
                                   ["namespace"], registry=r),
        targets_overlap=Gauge("vllm_watchdog_pods_targets_overlap", "Pods discovery would watch that several "
                              "targets' podSelectors match, targets that differ, after the last cycle: judged (by "
                              "the target with the longest window) or conflict (their engine profiles differ: not "
                              "judged).", ["outcome"], registry=r),
    )
    ProcessCollector(registry=r)
    m.build_info.labels(__version__, platform.python_version()).set(1)
    for overlap in ("judged", "conflict"):
        m.targets_overlap.labels(overlap)
    for outcome in SCRAPE_OUTCOMES:
        m.scrapes.labels(outcome)
    for status in API_AUTH_STATUSES:
        m.api_auth_failures.labels(status)
    return m
