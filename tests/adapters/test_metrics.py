"""The watchdog's own metrics (watchdog/adapters/metrics.py) as Prometheus sees them: the agreed names and label
values, every label value pre-created at 0, build_info, prometheus_client's process collector on the watchdog's
registry, and no ``*_created`` series in either exposition format, after counters moved too."""

from __future__ import annotations

import platform
import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from watchdog import __version__
from watchdog.adapters.metrics import Metrics, new_metrics
from watchdog.core.vocab import DEFERRAL_RULES, ENGINE_STATES, REMEDIATION_RESULTS, SCRAPE_OUTCOMES

# The names all helpers agreed on (issue 14): alerts and the dashboard are written against exactly these.
AGREED = {
    "vllm_watchdog_pods_watched", "vllm_watchdog_scrapes_total", "vllm_watchdog_engines", "vllm_watchdog_stalls_total",
    "vllm_watchdog_deletions_total", "vllm_watchdog_remediations_total", "vllm_watchdog_deferrals_total",
    "vllm_watchdog_cycle_duration_seconds", "vllm_watchdog_last_cycle_timestamp_seconds",
    "vllm_watchdog_event_failures_total", "vllm_watchdog_series_dropped_total", "vllm_watchdog_cycle_failures_total",
    "vllm_watchdog_breaker_open", "vllm_watchdog_leader", "vllm_watchdog_paused", "vllm_watchdog_build_info",
    "vllm_watchdog_quarantined", "vllm_watchdog_quarantine_changes_total", "vllm_watchdog_quarantine_held_total",
    # Refused credentials (issue 27).
    "vllm_watchdog_api_auth_failures_total", "vllm_watchdog_api_credentials_refused",
    # Source health (issue 30 item 4): {source}, a series per source in use, labelled when the watchdog starts.
    "vllm_watchdog_source_up", "vllm_watchdog_source_failed_cycles",
}


@pytest.fixture
def metrics() -> Metrics:
    m = new_metrics()
    m.scrapes.labels("ok").inc()  # every kind moved once: a _created series would appear for each
    m.deletions.labels("delete").inc()
    m.remediations.labels("deleted").inc()
    m.deferrals.labels("budget").inc()
    m.stalls.inc()
    m.cycle_duration.observe(0.3)
    return m


def text(m: Metrics) -> str:
    return generate_latest(m.registry).decode()


def families(exposition: str) -> set[str]:
    """Family names from the ``# TYPE`` lines, counters with their ``_total`` (as PromQL sees them)."""
    out = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, flags=re.M):
        out.add(name + "_total" if kind == "counter" and not name.endswith("_total") else name)
    return out


def test_the_agreed_names_and_nothing_else_of_ours(metrics: Metrics) -> None:
    ours = {f for f in families(text(metrics)) if f.startswith("vllm_watchdog_")}
    assert ours == AGREED


def test_no_created_series_in_either_format(metrics: Metrics) -> None:
    for exposition in (text(metrics), generate_openmetrics(metrics.registry).decode()):
        created = [line for line in exposition.splitlines() if "_created" in line]
        assert created == [], created[:3]
        assert 'vllm_watchdog_deletions_total{action="delete"} 1.0' in exposition


def test_label_values_are_pre_created_at_zero() -> None:
    m = new_metrics()
    get = m.registry.get_sample_value
    assert [get("vllm_watchdog_deletions_total", {"action": a}) for a in ("delete", "evict")] == [0.0, 0.0]
    assert [get("vllm_watchdog_remediations_total", {"result": r}) for r in REMEDIATION_RESULTS] == [0.0] * 8
    assert "skip" not in REMEDIATION_RESULTS  # internal, never counted
    assert [get("vllm_watchdog_deferrals_total", {"rule": r}) for r in DEFERRAL_RULES] == [0.0] * len(DEFERRAL_RULES)
    assert [get("vllm_watchdog_engines", {"state": s}) for s in ENGINE_STATES] == [0.0] * 6
    assert [get("vllm_watchdog_scrapes_total", {"outcome": o}) for o in SCRAPE_OUTCOMES] == [0.0] * 10
    assert get("vllm_watchdog_paused") == 0.0
    assert [get("vllm_watchdog_api_auth_failures_total", {"status": s}) for s in ("401", "403")] == [0.0, 0.0]
    assert get("vllm_watchdog_api_credentials_refused") == 0.0
    assert set(ENGINE_STATES) == {"idle", "paused", "progressing", "suspect", "stalled", "unknown"}


def test_build_info_and_the_process_collector_on_the_watchdogs_registry(metrics: Metrics) -> None:
    get = metrics.registry.get_sample_value
    assert get("vllm_watchdog_build_info", {"version": __version__,
                                            "python_version": platform.python_version()}) == 1.0
    assert (get("process_resident_memory_bytes") or 0) > 0 and (get("process_start_time_seconds") or 0) > 0
    assert "python_gc" not in text(metrics)  # its own registry: not the process-global one's collectors


def test_two_watchdogs_in_one_process_do_not_clash() -> None:
    first, second = new_metrics(), new_metrics()
    first.stalls.inc()
    assert (first.registry.get_sample_value("vllm_watchdog_stalls_total"),
            second.registry.get_sample_value("vllm_watchdog_stalls_total")) == (1.0, 0.0)


def test_source_health_has_a_series_only_for_the_sources_a_watchdog_uses() -> None:
    """No source is pre-created: a ``source_up{source="prometheus"}`` of 1 on a watchdog that only scrapes would say
    something untrue (the watchdog labels the sources in use at start: tests/controller/test_source_health.py)."""
    m = new_metrics()
    assert "vllm_watchdog_source_up{" not in text(m) and "vllm_watchdog_source_failed_cycles{" not in text(m)
    m.source_up.labels("scrape").set(1)
    assert 'vllm_watchdog_source_up{source="scrape"} 1.0' in text(m)
