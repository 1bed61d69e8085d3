"""Issue 30 item 1 at the cycle level (emulator + simulated pods + fake clock): a target's own window, and a pod's
window annotation that may only lengthen it. One pod is deleted at its target's window while a pod of the global
window is still kept, another is kept past the global window by its annotation, and an annotation that would
shorten the window is ignored with one Warning Event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from cycle_kit import NS, Rig, deleted_over, make_config, remediated

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.core.events import REASON_DELETED, REASON_PAUSE_IGNORED, REASON_WINDOW_IGNORED
from watchdog.core.model import NAMESPACE_LABEL, PAUSE_ANNOTATION, WINDOW_ANNOTATION
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

TARGETS = [{"name": "fast", "podSelector": "app=fast", "windowSeconds": 30},
           {"name": "vllm", "podSelector": "app.kubernetes.io/name=vllm"}]
# Rails out of the way: every stalled pod may go (the budgets and breakers are tested in test_rails.py).
LOOSE = {"windowSeconds": 60, "maxDeletions": 10, "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0,
         "breakerMinPods": 1000, "targets": TARGETS}


@pytest.fixture
def rig(emulator: EmulatorServer, tmp_path: Path) -> Iterator[Rig]:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    rig = Rig(emulator, make_config(tmp_path, **LOOSE))
    yield rig
    rig.close()


def deployment(rig: Rig, name: str, address: str, **pod_kw: Any) -> dict[str, dict[str, Any]]:
    sim = rig.sim(address, "wedged")
    return seed_deployment(rig.api, NS, name, sim.address, sim.port, **pod_kw)


def events(rig: Rig, pod: dict[str, Any], reason: str) -> list[str]:
    name = pod["metadata"]["name"]
    return [e["message"] for e in rig.api.list_events(NS)
            if e["reason"] == reason and e["involvedObject"]["name"] == name]


def test_a_target_window_deletes_sooner_and_an_annotation_keeps_a_pod_past_the_global_window(rig: Rig) -> None:
    patient = deployment(rig, "patient", "127.0.0.2", annotations={WINDOW_ANNOTATION: "300"})
    for _ in range(5):  # past the warm-up (one global window after the first listing)
        rig.cycle()
    fast = deployment(rig, "fast", "127.0.0.3", labels={"app": "fast"})["pod"]
    plain = deployment(rig, "plain", "127.0.0.4")["pod"]
    results = [remediated(rig.cycle()) for _ in range(3)]  # its samples at +0, +15, +30: its 30 s window
    assert results[-1] == [(f"{NS}/{fast['metadata']['name']}", "deleted")]
    assert not rig.exists(fast) and rig.exists(plain)  # the global 60 s window is not over for plain
    assert "window (set by its target) over" in events(rig, fast, REASON_DELETED)[0]
    for _ in range(2):
        rig.cycle()
    assert not rig.exists(plain)  # at the global window
    assert "60 s window (global) over" in events(rig, plain, REASON_DELETED)[0]
    for _ in range(6):
        rig.cycle()
    assert rig.exists(patient["pod"])  # 5 + 11 cycles of 15 s: 240 s stalled, past the global 60 s, within its 300
    assert rig.wd.status is not None
    doc = json.loads(rig.wd.status.body)
    [row] = [p for p in doc["pods"] if p["pod"] == patient["pod"]["metadata"]["name"]]
    assert row["policy"]["window_s"] == 300 and row["policy"]["window_source"] == "annotation"
    assert row["engines"][0]["state"] == "suspect"


@pytest.mark.parametrize("value", ["10", "1e9", "nan", "-300", "9" * 40, "7200"])
def test_an_annotation_that_would_shorten_is_malformed_or_too_high_is_ignored_with_one_event(
        rig: Rig, value: str) -> None:
    pod = deployment(rig, "tenant", "127.0.0.5", annotations={WINDOW_ANNOTATION: value})["pod"]
    assert deleted_over(rig, 8) == [f"{NS}/{pod['metadata']['name']}"]  # at the global window, as without it
    [warning] = events(rig, pod, REASON_WINDOW_IGNORED)  # once, however many cycles saw it
    assert f"{WINDOW_ANNOTATION}=" in warning and "the stall window stays 60 s (from the global setting)" in warning
    assert "60 s window (global) over" in events(rig, pod, REASON_DELETED)[0]


def test_the_ignored_annotation_event_is_not_written_again_after_a_restart(emulator: EmulatorServer,
                                                                           tmp_path: Path) -> None:
    """Issue 39 item 10: five restarts wrote five StallWindowAnnotationIgnored Events for one pod; now one."""
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    config = make_config(tmp_path, **LOOSE)
    sims = Rig(emulator, config)
    try:
        pod = deployment(sims, "tenant", "127.0.0.5", annotations={WINDOW_ANNOTATION: "10"})["pod"]
        for _ in range(3):  # three processes, one after the other
            rig = Rig(emulator, config)
            try:
                rig.cycle()
            finally:
                rig.close()
        assert len(events(sims, pod, REASON_WINDOW_IGNORED)) == 1
    finally:
        sims.close()


def test_a_standby_tells_an_ignored_annotation_once_it_leads(emulator: EmulatorServer, tmp_path: Path) -> None:
    """The Event a standby may not write (the fence) is written once it leads: it was marked told and never sent."""
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    leads = [False]
    kube = KubeClient.from_settings(KubeSettings(host=emulator.base_url, request_timeout_s=5))
    rig = Rig(emulator, make_config(tmp_path, **LOOSE), kube=kube, leader=lambda: leads[0],
              actuator=builders.actuator(kube, fence=lambda _s: leads[0]))
    try:
        pod = deployment(rig, "tenant", "127.0.0.5", annotations={WINDOW_ANNOTATION: "10"})["pod"]
        rig.cycle()
        assert events(rig, pod, REASON_WINDOW_IGNORED) == []  # a standby writes nothing
        leads[0] = True
        rig.cycle()
        rig.cycle()
        assert len(events(rig, pod, REASON_WINDOW_IGNORED)) == 1
    finally:
        rig.close()


def test_a_targets_own_action_is_the_one_taken(emulator: EmulatorServer, tmp_path: Path) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    targets = [{**TARGETS[0], "action": "evict"}, TARGETS[1]]
    rig = Rig(emulator, make_config(tmp_path, **{**LOOSE, "targets": targets}))
    try:
        fast = deployment(rig, "fast", "127.0.0.6", labels={"app": "fast"})["pod"]
        plain = deployment(rig, "plain", "127.0.0.7")["pod"]
        done = sorted(r for _ in range(8) for r in remediated(rig.cycle()) if r[1] in ("deleted", "evicted"))
        assert done == sorted([(f"{NS}/{fast['metadata']['name']}", "evicted"),
                               (f"{NS}/{plain['metadata']['name']}", "deleted")])
    finally:
        rig.close()


# Issue 41 item 1: a pod's pause annotation (vllm-watchdog.io/paused-until) holds its engines paused until then.
WALL = 1_764_972_000.0  # 2025-12-05T22:00:00Z at the rig's time 0


def paused_rig(emulator: EmulatorServer, tmp_path: Path, **overrides: Any) -> Rig:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    config = make_config(tmp_path, **{**LOOSE, **overrides})
    holder: list[Rig] = []
    rig = Rig(emulator, config, wall_clock=lambda: WALL + holder[0].now)
    holder.append(rig)
    return rig


def test_a_pause_annotation_holds_a_wedged_pod_paused_then_its_stall_clock_starts_afresh(
        emulator: EmulatorServer, tmp_path: Path) -> None:
    rig = paused_rig(emulator, tmp_path)
    try:
        # Paused until rig time 300 (a checkpoint): the engine runs requests with no progress throughout.
        pod = deployment(rig, "ckpt", "127.0.0.8", annotations={PAUSE_ANNOTATION: "2025-12-05T22:05:00Z"})["pod"]
        plain = deployment(rig, "plain", "127.0.0.9")["pod"]
        done: list[tuple[float, str]] = []
        for _ in range(30):
            report = rig.cycle()
            done += [(rig.now, ref) for ref, result in remediated(report) if result == "deleted"]
            if rig.now == 45.0:
                assert rig.wd.status is not None
                doc = json.loads(rig.wd.status.body)
                [row] = [p for p in doc["pods"] if p["pod"] == pod["metadata"]["name"]]
                assert row["state"] == "paused" and {e["state"] for e in row["engines"]} == {"paused"}
                assert row["paused_by"] == (f"its pod's annotation {PAUSE_ANNOTATION} holds it paused until "
                                            "2025-12-05T22:05:00Z")
                [other] = [p for p in doc["pods"] if p["pod"] == plain["metadata"]["name"]]
                assert other["paused_by"] is None
        # plain goes at the global 60 s window (after the 60 s warm-up); the paused pod's clock starts at its
        # first sample no longer paused (300 s: the pause holds while the wall clock is BEFORE its time) and runs
        # the 60 s window: deleted at 360, never while paused.
        assert [ref for _, ref in done] == [f"{NS}/{plain['metadata']['name']}", f"{NS}/{pod['metadata']['name']}"]
        assert done[1][0] == 360.0
        assert not events(rig, pod, REASON_PAUSE_IGNORED)
    finally:
        rig.close()


@pytest.mark.parametrize("value", ["tomorrow", "2025-12-05T22:05:00", "2025-12-05T23:10:00Z", "9" * 80])
def test_a_malformed_or_too_distant_pause_annotation_is_ignored_with_one_event(
        emulator: EmulatorServer, tmp_path: Path, value: str) -> None:
    rig = paused_rig(emulator, tmp_path)
    try:
        pod = deployment(rig, "ckpt", "127.0.0.10", annotations={PAUSE_ANNOTATION: value})["pod"]
        assert deleted_over(rig, 8) == [f"{NS}/{pod['metadata']['name']}"]  # at the global window, as without it
        [warning] = events(rig, pod, REASON_PAUSE_IGNORED)  # once, however many cycles saw it
        assert f"{PAUSE_ANNOTATION}=" in warning and "its engines are judged by their metrics" in warning
    finally:
        rig.close()


def test_a_pause_annotation_flipped_between_two_malformed_values_writes_its_event_once(
        emulator: EmulatorServer, tmp_path: Path) -> None:
    # Hostile-tenant review: every flip was a new value, so its named Event was POSTed again every cycle (refused
    # 409 by its name, one write request per cycle the tenant controls). Now once per pod UID and reason.
    rig = paused_rig(emulator, tmp_path)
    try:
        sim = rig.sim("127.0.0.11", "idle")
        pod = seed_deployment(rig.api, NS, "flip", sim.address, sim.port,
                              annotations={PAUSE_ANNOTATION: "tomorrow"})["pod"]
        path = f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
        for i in range(6):
            emulator.patch_object(path, {"metadata": {"annotations": {PAUSE_ANNOTATION: ("yesterday", "tomorrow")[
                i % 2]}}})
            rig.cycle()
        assert emulator.emulator.count_requests(verb="create", resource="events") == 1
        assert len(events(rig, pod, REASON_PAUSE_IGNORED)) == 1
    finally:
        rig.close()
