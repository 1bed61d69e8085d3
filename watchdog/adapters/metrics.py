"""The watchdog's own Prometheus metrics (served on ``/metrics`` of its listen address).

All live in their own registry, not the process-global default registry, so tests and the benchmark can build
several watchdogs in one process without clashes (:func:`new_metrics`). The registry also carries
prometheus_client's process collector (``process_*``: CPU, memory, open files, start time) and a
``vllm_watchdog_build_info`` gauge. No ``*_created`` series are exported (prometheus_client's
``disable_created_metrics``, process-wide): they double the series count and no alert reads them.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import get_args

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


@dataclass(frozen=True)
class Metrics:
    """Handles on every metric; RUNBOOK.md section 6 says what each means."""

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
    paused: Gauge
    build_info: Gauge
    quarantined: Gauge  # gated pods whose readiness gate is False (this replica's view, leader only)
    quarantine_changes: Counter  # {to}: admitted | quarantined | released
    quarantine_held: Counter  # {rule}: wanted drains held back by a rail, once per pod and rule
    api_auth_failures: Counter  # {status}: API answers refusing the watchdog's credentials (401, 403)
    api_refused: Gauge  # 1 while the API server refuses the credentials (/readyz fails for it)
    source_up: Gauge  # {source}: 0 while a source has read no pod for FAILED_CYCLES cycles (/readyz fails for it)
    source_failed_cycles: Gauge  # {source}: its failed cycles in a row (core/sourcehealth.py)

    def on_credentials(self, status: int | None, refused: bool) -> None:
        """Listener of :class:`watchdog.adapters.kubeauth.Credentials`: a refusal (its status) or a change."""
        if status is not None:
            self.api_auth_failures.labels(str(status)).inc()
        self.api_refused.set(int(refused))


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
                      ["state"], registry=r),
        stalls=Counter("vllm_watchdog_stalls", "Stall episodes: an engine series entering the stalled state.",
                       registry=r),
        deletions=Counter("vllm_watchdog_deletions", "Pods removed (delete or evict), as the deletion budget "
                          "counts them: a removal whose answer was lost is charged and counted too.", ["action"],
                          registry=r),
        remediations=Counter("vllm_watchdog_remediations", "Remediation attempts by outcome; a stall held back by "
                             "a safety rail counts as deferred once per stall episode, not once per cycle.",
                             ["result"], registry=r),
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
                          "and rule.", ["rule"], registry=r),
        breaker_open=Gauge("vllm_watchdog_breaker_open", "1 while the mass-stall breaker is open.", registry=r),
        leader=Gauge("vllm_watchdog_leader", "1 while this replica may act (holds the Lease, or no election).",
                     registry=r),
        paused=Gauge("vllm_watchdog_paused", "1 while deletions are paused: the run-time brake annotation, the "
                     "paused setting, or a brake not read yet.", registry=r),
        build_info=Gauge("vllm_watchdog_build_info", "Always 1; the labels say which build runs.",
                         ["version", "python_version"], registry=r),
        quarantined=Gauge("vllm_watchdog_quarantined", "Gated pods whose readiness gate condition is False after "
                          "the last cycle (out of their Services' endpoints); 0 on a standby replica.", registry=r),
        quarantine_changes=Counter("vllm_watchdog_quarantine_changes", "Readiness gate condition writes by the "
                                   "state written to: admitted (first True), quarantined (False), released (True "
                                   "again).", ["to"], registry=r),
        quarantine_held=Counter("vllm_watchdog_quarantine_held", "Wanted quarantines held back by a rail, once per "
                                "pod and rule.", ["rule"], registry=r),
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
    )
    ProcessCollector(registry=r)
    m.build_info.labels(__version__, platform.python_version()).set(1)
    for outcome in SCRAPE_OUTCOMES:
        m.scrapes.labels(outcome)
    for state in ENGINE_STATES:
        m.engines.labels(state)
    for action in REMOVAL_ACTIONS:
        m.deletions.labels(action)
    for result in REMEDIATION_RESULTS:
        m.remediations.labels(result)
    for rule in DEFERRAL_RULES:
        m.deferrals.labels(rule)
    for change in QUARANTINE_CHANGES:
        m.quarantine_changes.labels(change)
    for held in QUARANTINE_HOLDS:
        m.quarantine_held.labels(held)
    for status in API_AUTH_STATUSES:
        m.api_auth_failures.labels(status)
    return m
