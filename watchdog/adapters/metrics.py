"""The watchdog's own Prometheus metrics (served on ``/metrics`` of its listen address).

All live in :data:`REGISTRY`, not the process-global default registry, so tests and the benchmark can build
several watchdogs in one process without clashes (:func:`new_metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from watchdog.core.vocab import DEFERRAL_RULES, ENGINE_STATES, REMEDIATION_RESULTS, SCRAPE_OUTCOMES

DELETION_RESULTS = REMEDIATION_RESULTS


@dataclass(frozen=True)
class Metrics:
    """Handles on every metric; see RUNBOOK.md for their meaning and suggested alerts."""

    registry: CollectorRegistry
    pods_watched: Gauge
    scrapes: Counter
    engines: Gauge
    stalls: Counter
    deletions: Counter
    cycle_duration: Histogram
    last_cycle: Gauge
    event_failures: Counter
    series_dropped: Counter
    cycle_failures: Counter
    deferrals: Counter
    breaker_open: Gauge
    leader: Gauge


def new_metrics() -> Metrics:
    """A fresh registry with every metric registered, label values pre-created at 0."""
    r = CollectorRegistry()
    m = Metrics(
        registry=r,
        pods_watched=Gauge("vllm_watchdog_pods_watched", "Pods scraped in the last cycle.", registry=r),
        scrapes=Counter("vllm_watchdog_scrapes", "Scrapes of pod /metrics by outcome.", ["outcome"], registry=r),
        engines=Gauge("vllm_watchdog_engines", "Engine series by detector state after the last cycle.", ["state"],
                      registry=r),
        stalls=Counter("vllm_watchdog_stalls", "Stall episodes: an engine series entering the stalled state.",
                       registry=r),
        deletions=Counter("vllm_watchdog_deletions", "Remediation attempts by result.", ["result"], registry=r),
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
        deferrals=Counter("vllm_watchdog_deferrals", "Deletions deferred by a safety rail, by rule.", ["rule"],
                          registry=r),
        breaker_open=Gauge("vllm_watchdog_breaker_open", "1 while the mass-stall breaker is open.", registry=r),
        leader=Gauge("vllm_watchdog_leader", "1 while this replica may act (holds the Lease, or no election).",
                     registry=r),
    )
    for outcome in SCRAPE_OUTCOMES:
        m.scrapes.labels(outcome)
    for state in ENGINE_STATES:
        m.engines.labels(state)
    for result in DELETION_RESULTS:
        m.deletions.labels(result)
    for rule in DEFERRAL_RULES:
        m.deferrals.labels(rule)
    return m
