"""What the choke-point tests (tests/controller/test_remediator.py, test_evidence.py) share: the frozen snapshot
and its stalled verdict, a counting rescrape, the emulator with this namespace opted in (the ``api`` fixture), the
WatchedPod discovery makes of a pod, and a policy with every rail open. Not a test module: test modules import from
here, never from each other."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from builders import BASE, rails

from watchdog.config.settings import defaults
from watchdog.controller.remediator import Remediation, Remediator
from watchdog.controller.state import EngineRecord, PodRecord
from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.discovery import discover
from watchdog.core.evidence import HistoryEntry
from watchdog.core.model import NAMESPACE_LABEL, Target, WatchedPod
from watchdog.core.parsing import EngineSnapshot, ParseResult
from watchdog.core.policy import CycleFacts, DeletionPolicy
from watchdog.core.profiles import Selector
from watchdog.core.vocab import StallAction
from watchdog.demo.emulator import EmulatorServer

NS = "ml"
#: The progress signals of these tests' snapshots, in EngineSnapshot.progress order.
SIGNALS = (Selector("generation_tokens"), Selector("prompt_tokens"), Selector("heartbeat"))
SNAP = EngineSnapshot(labels=(("engine", "0"), ("model_name", "llama")), running=21.0, waiting=0.0,
                      progress=(456789.0, 1234567.0, 30200.0))


VERDICT = Verdict("stalled", 130.0, "stalled: 21 requests running (0 waiting), progress signals unchanged "
                  "(generation_tokens=456789, prompt_tokens=1234567, heartbeat=30200) for 130 s over 9 busy samples "
                  "(window 120 s)", t=130.0, running=21.0, busy_samples=9, waiting=0.0,
                  frozen=(("generation_tokens", 456789.0), ("prompt_tokens", 1234567.0), ("heartbeat", 30200.0)),
                  window_s=120.0)
WALL = dt.datetime(2026, 12, 1, 5, 14, 20, tzinfo=dt.UTC).timestamp()


class Rescrape:
    """Confirmation reads whose pod exports ``answer`` (default: the same frozen snapshot; None: no series), counted."""

    def __init__(self, answer: EngineSnapshot | None = SNAP, before: Callable[[], None] | None = None) -> None:
        self.answer, self.before, self.calls = answer, before, 0

    def read(self, target: WatchedPod) -> ParseResult:
        self.calls += 1
        if self.before is not None:
            self.before()
        return ParseResult((self.answer,) if self.answer is not None else (), 0, frozenset())


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    emulator.create_namespace("obs", {NAMESPACE_LABEL: "dry-run"})
    return emulator


def target_of(api: EmulatorServer, pod: dict[str, Any]) -> WatchedPod:
    """The WatchedPod discovery makes of ``pod`` (as stored by the emulator)."""
    meta = pod["metadata"]
    stored = api.get_pod(meta["namespace"], meta["name"])
    assert stored is not None
    found = discover(api.list_objects("/api/v1/namespaces"), [(Target("vllm", "x=y"), [stored])], base=BASE)
    [target] = found.targets
    return target


def open_policy(**kw: Any) -> DeletionPolicy:
    """A policy past warm-up whose rails are all open unless ``kw`` (Rails fields) narrows them; the rails
    themselves are tested in test_policy.py and test_rails.py."""
    limits = rails(**{"min_pod_age_seconds": 0.0, "max_deletions": 100, "max_deletions_per_namespace": 100, **kw})
    policy = DeletionPolicy(limits, started=-1e9)
    policy.begin_cycle(-1e9, watched=1, bad=0)
    return policy


def remediate(rem: Remediator, target: WatchedPod, series: EngineSnapshot = SNAP, verdict: Verdict = VERDICT, *,
              signals: tuple[Selector, ...] = SIGNALS, history: tuple[HistoryEntry, ...] = (),
              action: StallAction = "delete", count_waiting: bool | None = None) -> Remediation:
    """``rem`` acting on ``target`` as the cycle hands it a stalled engine series: the pod's record holding
    ``series`` judged ``verdict`` (its detector on ``signals`` and ``count_waiting``, the settings' unless given,
    the episode's ``history``), the pod first watched now and its target's policy the global one with ``action``."""
    config = defaults()
    record = PodRecord(restart_count=target.restart_count, first_seen=rem.clock())
    waiting = config.count_waiting if count_waiting is None else count_waiting
    detector = DetectorState(verdict.window_s or 120.0, count_waiting=waiting, signals=signals)
    record.engines[series.key] = EngineRecord(detector, last_seen=record.first_seen, last=series, verdict=verdict,
                                              history=history or None)
    record.use_policy(dataclasses.replace(config.base_policy, action=action))
    return rem.remediate(target, record, series.key, CycleFacts(leader=True))  # a sole replica
