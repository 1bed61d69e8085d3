"""Issue 36 item 4 at the cycle level (emulator + simulated pods + fake clock): a pod that two targets' podSelectors
match. The operator kept the default vllm target (every vLLM pod) and appended llama-405b with a 600 s window: the
pod was judged by vllm (the first listed) and deleted at the global window. Now the target with the longest window
judges it, /status says which and all that match, and one Warning Event tells it, also across a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cycle_kit import NS, Rig, make_config, remediated, sample

from watchdog.cli.status import render
from watchdog.controller.status import Liveness, document
from watchdog.core.events import REASON_DELETED, REASON_TARGETS_OVERLAP
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

TARGETS = [{"name": "vllm", "podSelector": "app.kubernetes.io/name=vllm"},
           {"name": "llama-405b", "podSelector": "app=llama-big", "windowSeconds": 150}]
LOOSE = {"windowSeconds": 60, "maxDeletions": 10, "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0,
         "breakerMinPods": 1000, "targets": TARGETS}
BIG = {"app.kubernetes.io/name": "vllm", "app": "llama-big"}  # what both podSelectors match


@pytest.fixture
def config(emulator: EmulatorServer, tmp_path: Path) -> Any:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    return make_config(tmp_path, **LOOSE)


def events(emulator: EmulatorServer, pod: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    return [e for e in emulator.list_events(NS)
            if e["reason"] == reason and e["involvedObject"]["name"] == pod["metadata"]["name"]]


def status_row(rig: Rig, pod: dict[str, Any]) -> dict[str, Any]:
    assert rig.wd.status is not None
    [row] = [p for p in json.loads(rig.wd.status.body)["pods"] if p["uid"] == pod["metadata"]["uid"]]
    return dict(row)


def test_the_longest_window_judges_a_pod_two_targets_match_and_it_is_told_once(emulator: EmulatorServer,
                                                                                config: Any) -> None:
    rig = Rig(emulator, config)
    try:
        big = seed_deployment(emulator, NS, "big", (s := rig.sim("127.0.0.2", "wedged")).address, s.port,
                              labels=BIG)["pod"]
        plain = seed_deployment(emulator, NS, "plain", (s := rig.sim("127.0.0.3", "wedged")).address, s.port)["pod"]
        deleted: dict[str, int] = {}
        for n in range(1, 9):  # 8 cycles of 15 s: past the global 60 s window (and the warm-up), within 150 s
            deleted.update({ref: n for ref, result in remediated(rig.cycle()) if result == "deleted"})
        assert f"{NS}/{plain['metadata']['name']}" in deleted  # the vllm target's own pod: at the global window
        assert rig.exists(big)  # on main: deleted with plain, at the 60 s window of the first listed target
        row = status_row(rig, big)
        assert (row["target"], row["targets"]) == ("llama-405b", ["vllm", "llama-405b"])
        assert row["policy"]["window_s"] == 150 and row["policy"]["window_source"] == "target"
        assert sample(rig, "vllm_watchdog_pods_targets_overlap", {"outcome": "judged"}) == 1
        for n in range(9, 20):
            deleted.update({ref: n for ref, result in remediated(rig.cycle()) if result == "deleted"})
        assert not rig.exists(big) and deleted[f"{NS}/{big['metadata']['name']}"] > deleted[
            f"{NS}/{plain['metadata']['name']}"]
        assert "150 s window (set by its target) over" in events(emulator, big, REASON_DELETED)[0]["message"]
    finally:
        rig.close()
    [told] = events(emulator, big, REASON_TARGETS_OVERLAP)  # one, however many cycles saw it
    assert "matched by targets vllm (window 60 s), llama-405b (window 150 s): judged by llama-405b" in told["message"]


def test_the_overlap_event_is_not_written_again_after_a_restart(emulator: EmulatorServer, config: Any) -> None:
    sims = Rig(emulator, config)
    pod = seed_deployment(emulator, NS, "big", (s := sims.sim("127.0.0.4", "progressing")).address, s.port,
                          labels=BIG)["pod"]
    try:
        for _ in range(3):  # three processes, one after the other
            rig = Rig(emulator, config)
            try:
                rig.cycle()
                rig.cycle()
            finally:
                rig.close()
    finally:
        sims.close()
    assert len(events(emulator, pod, REASON_TARGETS_OVERLAP)) == 1


def test_an_overlap_toggled_every_cycle_writes_its_event_once(emulator: EmulatorServer, config: Any) -> None:
    # Hostile-tenant review: a pod no longer overlapping was forgotten, so a tenant toggling its label every cycle
    # had the named Event POSTed again on every return (refused 409 by its name, or written anew past its TTL).
    rig = Rig(emulator, config)
    try:
        pod = seed_deployment(emulator, NS, "big", (s := rig.sim("127.0.0.5", "progressing")).address, s.port,
                              labels=BIG)["pod"]
        path = f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
        for i in range(6):
            emulator.patch_object(path, {"metadata": {"labels": {"app": ("llama-big", None)[i % 2]}}})
            rig.cycle()
        assert sample(rig, "vllm_watchdog_pods_targets_overlap", {"outcome": "judged"}) == 0  # the last: not
    finally:
        rig.close()
    assert emulator.emulator.count_requests(verb="create", resource="events") == 1


def test_targets_whose_profiles_differ_leave_the_pod_unjudged_and_say_so(emulator: EmulatorServer,
                                                                         tmp_path: Path) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    targets = [TARGETS[0], {**TARGETS[1], "profile": "sglang"}]
    rig = Rig(emulator, make_config(tmp_path, **{**LOOSE, "targets": targets}))
    try:
        pod = seed_deployment(emulator, NS, "big", (s := rig.sim("127.0.0.5", "wedged")).address, s.port,
                              labels=BIG)["pod"]
        for _ in range(12):
            report = rig.cycle()
            assert report.skipped.get("targets_conflict") == 1 and not remediated(report)
        assert rig.exists(pod)
        assert rig.wd.status is not None
        doc = json.loads(rig.wd.status.body)
        assert doc["pods"] == []
        [row] = doc["targets_conflict"]
        assert (row["pod"], row["targets"], row["reason"]) == (pod["metadata"]["name"], ["vllm", "llama-405b"],
                                                               "targets_conflict")
        assert sample(rig, "vllm_watchdog_pods_targets_overlap", {"outcome": "conflict"}) == 1
        text = render(json.loads(document(rig.wd.status, Liveness(rig.now, None, None, None))))
        assert (f"not judged {NS}/{pod['metadata']['name']}: its targets vllm, llama-405b have different engine "
                "profiles (targets_conflict)") in text
    finally:
        rig.close()
    [told] = events(emulator, pod, REASON_TARGETS_OVERLAP)
    assert "engine profiles disagree on what progress is: not judged" in told["message"]
