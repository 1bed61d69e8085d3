"""The readiness gate writer (watchdog.controller.quarantine) over FakeKube: what it patches, when it holds back,
its Events and metrics. The pure rule is tested in tests/core/test_quarantine_rule.py; the real API server's
endpoints following the gate in tests/cluster/test_cluster_quarantine.py."""

from __future__ import annotations

from typing import Any

import builders
import pytest
from builders import quarantine_rails
from builders import rails as policy_rails
from fakes import FakeClock, FakeKube
from metricsum import summed

from watchdog.adapters.events import EventRecorder
from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.adapters.metrics import Metrics, new_metrics
from watchdog.controller.quarantine import Quarantine
from watchdog.controller.state import EngineRecord, PodRecord
from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.model import GATE_CONDITION, OwnerRef, WatchedPod
from watchdog.core.policy import CycleFacts, DeletionPolicy
from watchdog.core.quarantine import QuarantineRails

RS = OwnerRef("apps/v1", "ReplicaSet", "engine-7d9", "rs-uid")


def listed(uid: str, *, gate: str | None = "True", ready: bool = True) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if gate is not None:
        conditions.append({"type": GATE_CONDITION, "status": gate})
    return {"metadata": {"uid": uid, "namespace": "ns", "name": f"pod-{uid}", "ownerReferences": [
        {"apiVersion": RS.api_version, "kind": RS.kind, "name": RS.name, "uid": RS.uid, "controller": True}]},
        "spec": {"readinessGates": [{"conditionType": GATE_CONDITION}]}, "status": {"conditions": conditions}}


def target(uid: str, mode: str = "enforce") -> WatchedPod:
    return WatchedPod(uid=uid, namespace="ns", name=f"pod-{uid}", ip="10.0.0.1", port=8000, path="/metrics",
                      target_name="vllm", profile="vllm", mode=mode, restart_count=0, owner=RS)  # type: ignore[arg-type]


def record(state: str, for_s: float = 0.0) -> PodRecord:
    pod = PodRecord(0, 0.0)
    verdict = Verdict(state, for_s, state, running=21.0)  # type: ignore[arg-type]
    pod.engines["model_name=m"] = EngineRecord(DetectorState(120.0), 0.0, verdict=verdict)
    return pod


class Rig:
    def __init__(self, *, leader: bool = True, patch: Any = None, rails: QuarantineRails | None = None) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.is_leader = leader

        def patched(namespace: str, name: str, uid: str, condition: dict[str, Any]) -> str:
            self.patches.append((name, uid, condition))
            return "patched"

        def event(namespace: str, body: dict[str, Any]) -> None:
            self.events.append((body["involvedObject"]["kind"], body["reason"], body["message"]))

        inner = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:9"))  # never called
        self.kube = FakeKube(inner, patch_pod_condition=patch or patched, create_event=event,
                             get_object=lambda *a: {"metadata": {"name": RS.name, "uid": RS.uid}})
        self.metrics: Metrics = new_metrics()
        self.metrics.watch_workloads({("ns", "vllm")})  # as the cycle does: the pair's series pre-created at 0
        self.clock = FakeClock(1000.0)
        self.policy = DeletionPolicy(policy_rails(), started=0.0)
        self.actuator = builders.actuator(self.kube, fence=lambda _s: self.is_leader)
        self.q = Quarantine(self.actuator, self.metrics, EventRecorder(self.kube, self.actuator, self.metrics),
                            rails or quarantine_rails(quarantine_after_seconds=60.0), enabled=True,
                            clock=self.clock, wall_clock=lambda: 1.7e9)

    def cycle(self, pods: list[dict[str, Any]], judged: list[tuple[WatchedPod, PodRecord]]) -> None:
        self.q.observe([(None, pods)])
        self.q.run(judged, self.policy, CycleFacts(self.is_leader))

    def metric(self, name: str, **labels: str) -> float | None:
        return summed(self.metrics.registry, name, labels)

    def statuses(self) -> list[tuple[str, str]]:
        return [(name, c["status"]) for name, _, c in self.patches]


def test_new_gated_pod_admitted_then_drained_then_released() -> None:
    rig = Rig()
    pods = [listed("a", gate=None, ready=False), listed("b"), listed("c")]
    rig.cycle(pods, [(target("a"), record("progressing"))])
    assert rig.patches[0][1] == "a" and rig.patches[0][2]["type"] == GATE_CONDITION
    assert rig.statuses() == [("pod-a", "True")]
    assert rig.events == []  # an admission is logged, not an Event (one per pod of every rollout)
    assert rig.metric("vllm_watchdog_quarantine_changes_total", to="admitted") == 1

    pods[0] = listed("a")
    rig.cycle(pods, [(target("a"), record("suspect", 59.0))])
    assert rig.statuses() == [("pod-a", "True")]  # suspect, shorter than quarantineAfterSeconds: nothing
    rig.cycle(pods, [(target("a"), record("suspect", 60.0))])
    assert rig.statuses() == [("pod-a", "True"), ("pod-a", "False")]
    assert rig.patches[1][2]["reason"] == "EngineStalled"
    assert "suspect: no progress for 60 s, 21 requests running" in rig.patches[1][2]["message"]
    assert [(k, r) for k, r, _ in rig.events] == [("Pod", "StalledPodQuarantined"),
                                                  ("ReplicaSet", "StalledPodQuarantined")]  # pod and top owner
    assert rig.events[0][2].startswith("Pod ns/pod-a taken out of its Services' endpoints: readiness gate "
                                       f"{GATE_CONDITION}=False; engine {{model_name=m}} suspect")
    assert rig.metric("vllm_watchdog_quarantined") == 1

    # The cached LIST still shows True: what was written wins, no second patch.
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    assert len(rig.patches) == 2
    rig.cycle(pods, [(target("a"), record("progressing"))])
    assert rig.statuses()[-1] == ("pod-a", "True")
    assert [r for k, r, _ in rig.events if k == "Pod"] == ["StalledPodQuarantined", "StalledPodReleased"]
    assert rig.metric("vllm_watchdog_quarantine_changes_total", to="released") == 1
    assert rig.metric("vllm_watchdog_quarantined") == 0


def test_unknown_neither_drains_nor_releases() -> None:
    rig = Rig()
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("unknown"))])
    rig.cycle([listed("a", gate="False", ready=False), listed("b")], [(target("a"), record("unknown"))])
    rig.cycle([listed("a", gate=None, ready=False), listed("b")], [(target("a"), record("unknown"))])
    assert rig.patches == []


def test_never_drains_the_last_ready_pod_and_says_why_once() -> None:
    rig = Rig(rails=quarantine_rails(quarantine_max_owner_fraction=1.0))
    pods = [listed("a"), listed("b", ready=False, gate=None)]
    for _ in range(3):
        rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    assert rig.patches == []
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="last_ready") == 1


def test_owner_share_holds_within_one_cycle() -> None:
    rig = Rig()  # fraction 0.5 of 4 pods: 2 may be drained
    pods = [listed(u) for u in "abcd"]
    rig.cycle(pods, [(target(u), record("stalled", 130.0)) for u in "abc"])
    assert rig.statuses() == [("pod-a", "False"), ("pod-b", "False")]
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="owner_share") == 1


def test_owner_share_counts_the_drains_of_earlier_cycles() -> None:
    rig = Rig()  # fraction 0.5 of 4 pods: 2 may be drained, whichever cycle drained them
    pods = [listed(u) for u in "abcd"]
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    rig.cycle(pods, [(target("b"), record("stalled", 130.0))])  # the LIST still shows a as True: written wins
    rig.cycle(pods, [(target(u), record("stalled", 130.0)) for u in "cd"])
    assert rig.statuses() == [("pod-a", "False"), ("pod-b", "False")]
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="owner_share") == 2


def test_a_namespace_breaker_holds_the_drain_there() -> None:
    rig = Rig()
    rig.policy.begin_cycle(1000.0, watched=10, bad=0, namespaces={"ns": (3, 3)})  # its breaker opens
    assert rig.policy.namespace_breaker_open("ns", rig.clock())
    rig.cycle([listed(u) for u in "ab"], [(target("a"), record("stalled", 130.0))])
    assert rig.patches == []
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="namespace_breaker") == 1


def test_a_new_leader_starts_from_the_listing_not_from_what_it_wrote_before() -> None:
    rig = Rig()
    pods = [listed(u) for u in "ab"]
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])  # wrote a=False
    rig.is_leader = False
    rig.cycle(pods, [])  # another replica leads meanwhile, and released a (the listing shows True)
    rig.is_leader = True
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    assert rig.statuses() == [("pod-a", "False"), ("pod-a", "False")]  # written again: it did not trust its memory


def test_dry_run_namespace_only_admits_and_releases_unless_opted_in() -> None:
    rig = Rig()
    rig.cycle([listed("a", gate=None), listed("b")], [(target("a", "dry-run"), record("progressing"))])
    rig.cycle([listed("a"), listed("b")], [(target("a", "dry-run"), record("stalled", 130.0))])
    assert rig.statuses() == [("pod-a", "True")]
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="dry_run") == 1
    opted = Rig(rails=quarantine_rails(quarantine_in_dry_run=True))
    opted.cycle([listed("a"), listed("b")], [(target("a", "dry-run"), record("stalled", 130.0))])
    assert opted.statuses() == [("pod-a", "False")]


def test_breaker_and_pause_hold_the_drain_but_never_the_release() -> None:
    rig = Rig()
    rig.policy.begin_cycle(1000.0, watched=3, bad=3)  # the mass-stall breaker opens
    rig.policy.set_brake("the run-time brake holds")
    pods = [listed("a"), listed("b", gate="False", ready=False), listed("c")]
    rig.cycle(pods, [(target("a"), record("stalled", 130.0)), (target("b"), record("progressing"))])
    assert rig.statuses() == [("pod-b", "True")]
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="paused") == 1
    rig.policy.set_brake(None)
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    assert rig.metric("vllm_watchdog_quarantine_held_total", rule="breaker") == 1
    assert rig.statuses() == [("pod-b", "True")]


def test_only_the_leader_writes() -> None:
    rig = Rig(leader=False)
    rig.cycle([listed("a", gate=None, ready=False), listed("b")], [(target("a"), record("progressing"))])
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("stalled", 130.0))])
    assert rig.patches == [] and rig.events == []
    assert rig.metric("vllm_watchdog_quarantined") == 0
    rig.is_leader = True
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("stalled", 130.0))])
    assert rig.statuses() == [("pod-a", "False")]


@pytest.mark.parametrize("result", ["not_found", "conflict"])
def test_a_gone_or_replaced_pod_is_not_an_error(result: str) -> None:
    rig = Rig(patch=lambda *a: result)
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("stalled", 130.0))])
    assert rig.events == [] and rig.q.written == {}
    assert rig.metric("vllm_watchdog_quarantine_changes_total", to="quarantined") == 0


def test_a_failed_patch_is_logged_and_retried_next_cycle() -> None:
    rig = Rig()
    rig.kube.fail["patch_pod_condition"] = KubeError("patch pod ns/pod-a status", 503, "Service Unavailable")
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("stalled", 130.0))])
    del rig.kube.fail["patch_pod_condition"]
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("stalled", 130.0))])
    assert rig.kube.calls["patch_pod_condition"] == 2
    assert rig.statuses() == [("pod-a", "False")]


@pytest.mark.parametrize(("pods", "share", "allowed"), [("ab", 1.0, 1), ("abcd", 0.5, 2)])
@pytest.mark.parametrize("lost", [KubeError("patch pod status", 504, "Gateway Timeout"),
                                  KubeError("patch pod status", 0, "ReadTimeoutError: timed out")])
def test_a_drain_whose_answer_was_lost_counts_against_the_owner_share(pods: str, share: float, allowed: int,
                                                                      lost: KubeError) -> None:
    """Issue 27 item 1: the API server applied the pods/status PATCH but the answer was lost. It must count as a
    drain at once, or the same cycle drains the siblings too (seen: 2 of 2 drained at share 1.0, 0 Ready left;
    3 of 4 at 0.5)."""
    applied: list[str] = []

    def applied_then_lost(namespace: str, name: str, uid: str, condition: dict[str, Any]) -> str:
        applied.append(name)
        raise lost

    rig = Rig(patch=applied_then_lost, rails=quarantine_rails(quarantine_after_seconds=60.0,
                                                             quarantine_max_owner_fraction=share))
    rig.cycle([listed(u) for u in pods], [(target(u), record("stalled", 130.0)) for u in pods])
    assert len(applied) == allowed
    assert rig.events == []  # nothing is announced that is not known to have happened


def test_a_lost_drain_is_resolved_by_the_next_listing() -> None:
    """Not applied after all (the next LIST still shows the gate True): sent again, its rails asked again."""
    rig = Rig(rails=quarantine_rails(quarantine_after_seconds=60.0, quarantine_max_owner_fraction=1.0))
    rig.kube.fail["patch_pod_condition"] = KubeError("patch pod status", 504, "Gateway Timeout")
    pods = [listed("a"), listed("b")]
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    del rig.kube.fail["patch_pod_condition"]
    rig.cycle(pods, [(target("a"), record("stalled", 130.0))])
    assert rig.kube.calls["patch_pod_condition"] == 2
    assert rig.statuses() == [("pod-a", "False")]


def test_a_standby_patches_nothing_even_if_the_cycle_thinks_it_leads() -> None:
    """The fence is asked right before the write: a Lease lost after the cycle read its leadership holds it."""
    rig = Rig()
    rig.actuator.fence = lambda _s: False
    rig.cycle([listed("a"), listed("b")], [(target("a"), record("stalled", 130.0))])
    assert rig.patches == [] and rig.events == []


def test_off_does_nothing() -> None:
    rig = Rig()
    rig.q.enabled = False
    rig.cycle([listed("a", gate=None)], [(target("a"), record("progressing"))])
    assert rig.patches == []
