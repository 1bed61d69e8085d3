"""The evidence kept before a deletion, through the choke point (Remediator.remediate) against the Kubernetes
API emulator over real HTTP, the log read replaced where the emulator has no kubelet behind pods/log; and the
episode history the cycle's PodRecord keeps (none for a healthy fleet)."""

from __future__ import annotations

import logging
from typing import Any

import builders
import pytest
from fakes import FakeKube
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

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.adapters.metrics import new_metrics
from watchdog.controller.evidence import EvidenceKeeper
from watchdog.controller.remediator import Remediator
from watchdog.controller.state import PodRecord
from watchdog.core.detector import DetectorState
from watchdog.core.evidence import HistoryEntry
from watchdog.core.parsing import EngineSnapshot, ParseResult
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

__all__ = ["api"]  # the fixture, shared
HISTORY = (HistoryEntry(100.0, "suspect", 21.0, 0.0, (456789.0,), ("generation_tokens",)),
           HistoryEntry(130.0, "stalled", 21.0, 0.0, (456789.0,), ("generation_tokens",)))


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "watchdog.controller.evidence"]


def remediator(kube: Any, *, lines: int = 100, **rails: Any) -> Remediator:
    keeper = EvidenceKeeper(builders.actuator(kube), log_lines=lines, log_bytes=1024, clock=lambda: 140.0,
                            wall_clock=lambda: WALL)
    return builders.remediator(kube, open_policy(**rails), Rescrape(), new_metrics(), clock=lambda: 140.0,
                      wall_clock=lambda: WALL, evidence=keeper)


def test_the_evidence_is_written_right_before_the_delete(api: EmulatorServer, kube_client: KubeClient,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    target = target_of(api, seed_deployment(api, NS, "llama", "10.0.0.5", 8000)["pod"])
    reads: list[tuple[str, str, str, int, int]] = []
    seen_at_delete: list[int] = []

    def log(namespace: str, name: str, container: str, lines: int, limit: int) -> bytes:
        reads.append((namespace, name, container, lines, limit))
        return b"".join(b"INFO step %d\n" % i for i in range(500)) + b"\x1b[2Jwedged\r\n"

    def delete(namespace: str, name: str, uid: str, grace: int | None) -> Any:
        seen_at_delete.append(len(records(caplog)))
        return kube_client.delete_pod(namespace, name, uid, grace)

    kube = FakeKube(kube_client, read_pod_log=log, delete_pod=delete)
    with caplog.at_level(logging.INFO):
        assert remediate(remediator(kube), target, SNAP, VERDICT, signals=SIGNALS, history=HISTORY).result == "deleted"
    assert seen_at_delete == [1]  # the record existed when the DELETE was sent
    assert reads == [(NS, target.name, "vllm", 100, 1024 + 1)]  # the engine container, bounded (+1: a cut shows)
    [line] = records(caplog)
    eid = f"{target.uid[:8]}-{int(WALL)}"
    assert line.levelno == logging.WARNING
    assert line.getMessage() == f"evidence for {target.ref} uid {target.uid}: id {eid}"
    evidence = line.__dict__["evidence"]
    assert (evidence["id"], evidence["outcome"], evidence["dry_run"], evidence["final_from"]) == (
        eid, "delete", False, "confirmation")
    assert [(h["age_s"], h["state"]) for h in evidence["history"]] == [(40.0, "suspect"), (10.0, "stalled")]
    assert evidence["final"] == {"running": 21.0, "waiting": 0.0, "paused": None, "progress": {
        "generation_tokens": 456789.0, "prompt_tokens": 1234567.0, "heartbeat": 30200.0}}
    assert evidence["log"].endswith("INFO step 499\n\x1b[2Jwedged\r\n") and evidence["log_cut"] is True
    assert len(evidence["log"].encode()) <= 1024
    assert all(f"evidence: {eid} in the watchdog log." in e["message"] for e in api.list_events(NS))


@pytest.mark.parametrize("failure", [KubeError("read log of pod", 403, "Forbidden", "pods/log is forbidden"),
                                     KubeError("read log of pod", 0, "ReadTimeoutError: timed out"),
                                     RuntimeError("anything else")])
def test_a_log_that_cannot_be_read_never_stops_the_deletion(api: EmulatorServer, kube_client: KubeClient,
                                                            caplog: pytest.LogCaptureFixture,
                                                            failure: Exception) -> None:
    target = target_of(api, seed_deployment(api, NS, "llama", "10.0.0.5", 8000)["pod"])
    kube = FakeKube(kube_client)
    kube.fail["read_pod_log"] = failure
    with caplog.at_level(logging.INFO):
        assert remediate(remediator(kube), target, SNAP, VERDICT, signals=SIGNALS, history=HISTORY).result == "deleted"
    assert api.get_pod(NS, target.name) is None and kube.calls["read_pod_log"] == 1
    [line] = records(caplog)
    assert line.__dict__["evidence"]["log"] == f"log unavailable: {failure}"


def test_evidence_that_cannot_be_written_never_stops_the_deletion(api: EmulatorServer, kube_client: KubeClient,
                                                                  caplog: pytest.LogCaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    target = target_of(api, seed_deployment(api, NS, "llama", "10.0.0.5", 8000)["pod"])

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("the record could not be built")

    monkeypatch.setattr("watchdog.controller.evidence.build_record", broken)
    with caplog.at_level(logging.INFO):
        outcome = remediate(remediator(kube_client, lines=0), target, SNAP, VERDICT, signals=SIGNALS, history=HISTORY)
    assert outcome.result == "deleted" and api.get_pod(NS, target.name) is None
    assert [r.getMessage() for r in records(caplog)] == [f"evidence for {target.ref} could not be written"]
    assert "evidence:" not in " ".join(e["message"] for e in api.list_events(NS))  # no pointer to nothing


def test_dry_run_keeps_the_evidence_with_the_cycles_values(api: EmulatorServer, kube_client: KubeClient,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    target = target_of(api, seed_deployment(api, NS, "llama", "10.0.0.5", 8000)["pod"])
    kube = FakeKube(kube_client)
    with caplog.at_level(logging.INFO):
        result = remediate(remediator(kube, lines=0, dry_run=True), target, SNAP, VERDICT, signals=SIGNALS,
                                                                    history=HISTORY)
    assert result.result == "dry_run" and api.get_pod(NS, target.name) is not None
    assert kube.calls.get("read_pod_log", 0) == 0  # evidenceLogLines 0: no pods/log request at all
    [line] = records(caplog)
    evidence = line.__dict__["evidence"]
    assert (evidence["outcome"], evidence["dry_run"], evidence["final_from"]) == ("dry_run", True, "cycle")
    assert evidence["log"] == "log not kept (evidenceLogLines is 0)" and len(evidence["history"]) == 2
    assert all(e["message"].endswith(f"evidence: {evidence['id']} in the watchdog log.") for e in api.list_events(NS))


def test_a_deferral_writes_no_evidence(api: EmulatorServer, kube_client: KubeClient,
                                       caplog: pytest.LogCaptureFixture) -> None:
    target = target_of(api, seed_deployment(api, NS, "llama", "10.0.0.5", 8000)["pod"])
    with caplog.at_level(logging.INFO):
        assert remediate(remediator(FakeKube(kube_client), paused=True), target, SNAP, VERDICT).result == "deferred"
    assert records(caplog) == []
    assert all("evidence" not in e["message"] for e in api.list_events(NS))


def parsed(*snaps: EngineSnapshot) -> ParseResult:
    return ParseResult(series=snaps, skipped_lines=0, found_families=frozenset({"x"}))


def test_a_healthy_fleet_holds_no_history() -> None:
    """10,000 progressing engine series (one per pod record) keep no history; a stalled one keeps its episode."""
    def new() -> DetectorState:
        return DetectorState(60.0, signals=SIGNALS)
    pods = [PodRecord(0, 0.0) for _ in range(10_000)]
    for t in range(0, 150, 15):
        for pod in pods:
            pod.observe(float(t), parsed(EngineSnapshot((), 3.0, 0.0, (float(t), 1.0, 1.0))), 60.0, new)
    assert [e.history for p in pods for e in p.engines.values()] == [None] * 10_000
    stuck = PodRecord(0, 0.0)
    for t in range(0, 150, 15):
        stuck.observe(float(t), parsed(EngineSnapshot((), 3.0, 0.0, (5.0, 1.0, 1.0))), 60.0, new)
    [engine] = stuck.engines.values()
    assert engine.verdict is not None and engine.verdict.state == "stalled"
    assert engine.history is not None and [e.t for e in engine.history] == [float(t) for t in range(0, 150, 15)]
