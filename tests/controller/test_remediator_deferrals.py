"""A held stall at the choke point (issue 30 items 2 and 3): its Event and log line say when it may proceed (in
seconds and as a wall-clock UTC time, from the policy's one Decision), and every metric counts it once per
episode however many cycles it is held."""

from __future__ import annotations

import logging

import builders
import pytest
from fakes import FakeClock
from metricsum import summed
from remediator_kit import (
    NS,
    SIGNALS,
    SNAP,
    VERDICT,
    WALL,
    Rescrape,
    api,
    open_policy,
    remediate,
    target_of,
)

from watchdog.adapters.kube import KubeClient
from watchdog.adapters.metrics import Metrics, new_metrics
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

__all__ = ["api"]  # the fixture, used by name

DEFERRED = "StalledPodDeletionDeferred"
WINDOW = "the rolling 600 s window"


def value(m: Metrics, name: str, labels: dict[str, str]) -> float | None:
    return summed(m.registry, name, labels)


def test_a_budget_deferral_says_when_the_budget_frees(api: EmulatorServer, kube_client: KubeClient,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A namespace budget of 1 per 600 s, a deletion at t=100: the deferral at t=250 frees in 450 s; the Event
    and the log line give the wall time (the remediator's wall clock, 05:14:20Z, plus 450 s)."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    policy = open_policy(max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    policy.record_deletion(100.0, uid="earlier", namespace=NS, owner=None)
    rem = builders.remediator(kube_client, policy, Rescrape(), new_metrics(), clock=lambda: 250.0,
                              wall_clock=lambda: WALL)
    target = target_of(api, seeded["pod"])
    with caplog.at_level(logging.INFO, logger="watchdog.controller.remediator"):
        outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
    when = f"may proceed in 450 s (at 2026-12-01T05:21:50Z), when the oldest counted deletion in {NS} leaves {WINDOW}"
    assert (outcome.result, outcome.rule) == ("deferred", "namespace_budget")
    assert outcome.detail == f"{target.ref}: namespace budget used: 1 deletions in {NS} in the last 600 s; {when}"
    messages = {e["message"] for e in api.list_events(NS) if e["reason"] == DEFERRED}
    assert len(messages) == 1 and next(iter(messages)).endswith(
        f"Why: rule namespace_budget, namespace budget used: 1 deletions in {NS} in the last 600 s; {when}.")
    (line,) = [r for r in caplog.records if r.getMessage().startswith("remediation ")]
    assert line.reason == outcome.detail  # type: ignore[attr-defined]
    held = policy.episodes(260.0)(target.uid, SNAP.key)[2]  # what /status shows, ten seconds later
    assert held == {"rule": "namespace_budget", "frees_in_s": 440.0,
                    "frees_when": f"when the oldest counted deletion in {NS} leaves {WINDOW}"}


def test_a_stall_held_for_24_cycles_is_counted_once(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Issue 30 item 2: remediations_total{result="deferred"} rose every cycle (24 for one held stall) while
    deferrals_total counted it once. Both count it once per episode; a second rule holding the same episode adds
    to deferrals_total{rule} (and gets its Event) but not to the remediations; a new episode counts again."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    clock = FakeClock(1000.0)
    policy = open_policy(max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    policy.record_deletion(clock.now, uid="earlier", namespace=NS, owner=None)
    metrics = new_metrics()
    rem = builders.remediator(kube_client, policy, Rescrape(), metrics, clock=clock, wall_clock=lambda: WALL)
    target = target_of(api, seeded["pod"])
    for _ in range(24):
        clock.advance(15.0)
        assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).rule == "namespace_budget"
    deferred = {"result": "deferred"}
    assert value(metrics, "vllm_watchdog_remediations_total", deferred) == 1.0
    assert value(metrics, "vllm_watchdog_deferrals_total", {"rule": "namespace_budget"}) == 1.0
    assert len([e for e in api.list_events(NS) if e["reason"] == DEFERRED]) == 2  # the pod and its Deployment
    policy.set_brake("the brake")  # the same episode, now held by another rule
    for _ in range(3):
        clock.advance(15.0)
        assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).rule == "paused"
    assert value(metrics, "vllm_watchdog_remediations_total", deferred) == 1.0
    assert value(metrics, "vllm_watchdog_deferrals_total", {"rule": "paused"}) == 1.0
    policy.episode_over(target.uid, SNAP.key)  # it progressed; it wedges again: a new episode
    clock.advance(15.0)
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).rule == "paused"
    assert value(metrics, "vllm_watchdog_remediations_total", deferred) == 2.0
    assert value(metrics, "vllm_watchdog_deferrals_total", {"rule": "paused"}) == 2.0
