"""What ``/status`` says (watchdog/controller/status.py): per pod and engine series after real cycles on the API
emulator with simulated pods (state, for how long, the last scrape, the signal values, how the stall was acted
on), the policy's view, the bounds (worst first, the rest counted) and a valid JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import rails
from cycle_kit import NS, Rig, make_config

from watchdog.controller import status
from watchdog.controller.state import EngineRecord, PodRecord
from watchdog.core.detector import DetectorState
from watchdog.core.model import NAMESPACE_LABEL, WatchedPod
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.policy import Decision, DeletionPolicy
from watchdog.core.profiles import get_profile
from watchdog.demo.emulator import EmulatorServer

VLLM = get_profile("vllm")


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    return emulator


def rows_by_name(doc: Any) -> dict[str, dict[str, Any]]:
    return {p["pod"].split("-", 1)[0]: p for p in doc["pods"]}


def test_the_snapshot_shows_each_pod_and_engine_worst_first_with_the_policys_view(api: EmulatorServer,
                                                                                  tmp_path: Path) -> None:
    rig = Rig(api, make_config(tmp_path, paused=True, scrapeDeadlineSeconds=0.3, connectTimeoutSeconds=0.2))
    try:
        wedged = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))["pod"]
        rig.deployment("idle", rig.sim("127.0.0.3", "idle"))
        mute = rig.deployment("mute", rig.sim("127.0.0.5", "hang"))["pod"]
        assert rig.wd.status is None  # nothing before the first completed cycle
        reports = [rig.cycle() for _ in range(4)]  # t = 15 .. 60; stalled from the third cycle on
        assert [r.rule for _, r in reports[2].remediations] == ["paused"]
        snap = rig.wd.status
        assert snap is not None and snap.taken_at == 60.0
        doc = snap.doc
        assert [p["pod"].split("-", 1)[0] for p in doc["pods"]] == ["wedged", "mute", "idle"]  # worst first
        assert doc["engines"] == {"idle": 1, "paused": 0, "progressing": 0, "suspect": 0, "stalled": 1,
                                  "unknown": 1}
        assert (doc["pods_watched"], doc["truncated"], doc["leader"]) == (3, {"pods": 0}, True)

        pods = rows_by_name(doc)
        w = pods["wedged"]
        assert (w["namespace"], w["uid"], w["mode"], w["state"]) == (NS, wedged["metadata"]["uid"], "enforce",
                                                                     "stalled")
        assert w["scrape"] == {"outcome": "ok", "detail": None, "age_s": 0.0, "failing_for_s": None}
        [engine] = w["engines"]
        assert engine["state"] == "stalled" and engine["for_s"] == 45.0  # busy and frozen since t = 15
        assert engine["engine"] == 'engine="0",model_name="' + engine["labels"]["model_name"] + '"'
        assert engine["running"] > 0 and engine["seen_s_ago"] == 0.0
        assert set(engine["progress"]) == set(VLLM.progress_names())
        assert engine["progress"]["vllm:generation_tokens_total"] > 0
        assert (engine["acted"], engine["deferred_by"]) == (None, ["paused"])
        assert engine["held"] == {"rule": "paused", "frees_in_s": None,  # what holds it now, and until when
                                  "frees_when": "when paused is set back to false"}

        m = pods["mute"]
        assert (m["uid"], m["state"], m["engines"]) == (mute["metadata"]["uid"], "unknown", [])
        assert m["scrape"]["outcome"] == "timeout" and m["scrape"]["detail"].startswith("timeout after")
        assert m["scrape"]["failing_for_s"] == 45.0  # failing since the first cycle, t = 15

        policy = doc["policy"]
        assert (policy["paused"], policy["paused_why"]) == (True, "paused: true")
        assert policy["deferrals"] == {"paused": 1}
        assert policy["budget"]["cluster"] == {"max": 2, "used": 0, "left": 2}
        assert policy["breaker"] == {"open": False, "why": None, "closes_in_s": None, "namespaces": {}}
        assert policy["warm_up"] == {"done": True, "left_s": 0.0}
        assert json.loads(json.dumps(doc)) == doc  # plain JSON all the way down
    finally:
        rig.close()


def target(i: int) -> WatchedPod:
    return WatchedPod(uid=f"uid-{i}", namespace="ns", name=f"pod-{i:02d}", ip="10.0.0.1", port=8000,
                      path="/metrics", target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


def engine(*, running: float, progress: tuple[float | None, ...]) -> EngineRecord:
    snap = EngineSnapshot(labels=(("engine", "0"),), running=running, waiting=float("inf"), progress=progress)
    return EngineRecord(DetectorState(120.0, signals=VLLM.progress), last_seen=0.0, last=snap)


def test_the_listing_is_bounded_the_rest_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "MAX_PODS", 3)
    targets = [target(i) for i in range(5)]
    pods = {t.uid: PodRecord(0, 0.0, outcome="refused", scrape_detail="connection refused") for t in targets}
    snap = status.snapshot(targets, pods, {"vllm": VLLM}, DeletionPolicy(rails()), now=10.0, leader=True,
                           clock_skew_s=None)
    assert [p["pod"] for p in snap.doc["pods"]] == ["pod-00", "pod-01", "pod-02"]
    assert snap.doc["truncated"] == {"pods": 2} and snap.doc["pods_watched"] == 5
    assert snap.doc["engines"]["unknown"] == 5  # every pod is counted, listed or not

    monkeypatch.setattr(status, "MAX_PODS", 100)
    monkeypatch.setattr(status, "MAX_SERIES", 2)  # the series bound: a pod is listed whole or not at all
    pods["uid-0"].engines = {"a": engine(running=1.0, progress=()), "b": engine(running=1.0, progress=())}
    pods["uid-1"].engines = {"a": engine(running=1.0, progress=())}
    snap = status.snapshot(targets, pods, {"vllm": VLLM}, DeletionPolicy(rails()), now=10.0, leader=True,
                           clock_skew_s=None)
    assert [len(p["engines"]) for p in snap.doc["pods"]] == [2] and snap.doc["truncated"] == {"pods": 4}


def test_non_finite_values_are_null_and_the_document_is_valid_json() -> None:
    t = target(0)
    record = PodRecord(0, 0.0, outcome="ok", scraped_at=9.0)
    record.engines = {"k": engine(running=float("nan"), progress=(5.0, float("nan")))}
    snap = status.snapshot([t], {t.uid: record}, {"vllm": VLLM}, DeletionPolicy(rails()), now=10.0, leader=False,
                           clock_skew_s=None)
    live = status.Liveness(now=12.5, started=11.0, completed=10.0, failed=(4.0, "list namespaces: HTTP 503"))
    doc = json.loads(status.document(snap, live))  # json.loads refuses NaN only when asked: check by hand too
    assert "NaN" not in status.document(snap, live).decode() and "Infinity" not in snap.body.decode()
    [row] = doc["pods"][0]["engines"]
    assert (row["running"], row["waiting"], row["state"]) == (None, None, "unknown")
    assert row["progress"] == {"vllm:generation_tokens_total": 5.0, "vllm:iteration_tokens_total_count": None}
    assert doc["snapshot_age_s"] == 2.5 and doc["leader"] is False
    assert doc["cycle"] == {"started_s_ago": 1.5, "completed_s_ago": 2.5, "last_error": "list namespaces: HTTP 503",
                            "last_error_s_ago": 8.5}
    assert doc["pods"][0]["scrape"]["age_s"] == 1.0


def test_before_the_first_cycle_the_document_has_the_loop_facts_only() -> None:
    live = status.Liveness(now=5.0, started=1.0, completed=None, failed=(2.0, "boom"))
    doc = json.loads(status.document(None, live))
    assert doc == {"snapshot_age_s": None, "pods": None, "policy": None,
                   "cycle": {"started_s_ago": 4.0, "completed_s_ago": None, "last_error": "boom",
                             "last_error_s_ago": 3.0}}


def test_the_document_is_made_when_first_asked_from_what_the_cycle_left(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real_pod = status._pod
    monkeypatch.setattr(status, "_pod", lambda *a: built.append(1) or real_pod(*a))
    t = target(0)
    record = PodRecord(0, 0.0, outcome="ok")
    record.engines = {"a": engine(running=3.0, progress=(7.0,))}
    policy = DeletionPolicy(rails())
    snap = status.snapshot([t], {t.uid: record}, {"vllm": VLLM}, policy, now=10.0, leader=True,
                           clock_skew_s=None)
    assert built == []  # a cycle nobody asks about builds no document
    record.outcome, record.engines["a"].last_seen = "timeout", 9.0  # the next cycle changes the record ...
    record.engines["b"] = engine(running=1.0, progress=())
    policy.held(t.uid, "a", Decision("defer", "paused", "held"), 10.0)
    (pod,) = snap.doc["pods"]  # ... the snapshot still says what this cycle left
    assert built == [1] and snap.doc is snap.doc  # built once
    assert pod["scrape"]["outcome"] == "ok" and [e["engine"] for e in pod["engines"]] == ["a"]
    assert pod["engines"][0]["seen_s_ago"] == 10.0 and pod["engines"][0]["deferred_by"] == []
    assert pod["engines"][0]["running"] == 3.0 and snap.doc["policy"]["deferrals"] == {}
