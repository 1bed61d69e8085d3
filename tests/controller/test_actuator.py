"""watchdog/controller/actuator.py: a decided removal is a delete or an eviction of exactly the pod named, UID as
its precondition; any other action is refused before anything is sent (never a delete by default); a decided gate
change is a pods/status patch of that pod; a write the leadership fence holds back is not sent; what a write came
to is one closed outcome (Applied), a failed request sorted into lost (may have been applied) or refused."""

from __future__ import annotations

from typing import Any

import builders
import pytest
from fakes import FakeKube
from remediator_kit import NS, api, target_of

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.controller.actuator import Applied, GateChange, Removal
from watchdog.controller.ledger import DeletionLedger
from watchdog.core.model import WatchedPod
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

__all__ = ["api"]  # the fixture, from remediator_kit.py

POD = WatchedPod(uid="u-1", namespace="ns", name="pod-1", ip="10.0.0.1", port=8000, path="/metrics",
                 target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


class Recorder:
    """The pod writes of a KubeApi, recorded."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> str:
        self.sent.append(("delete", namespace, name, uid, grace_period_s))
        return "deleted"

    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> str:
        self.sent.append(("evict", namespace, name, uid, grace_period_s))
        return "evicted"

    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, Any]) -> str:
        self.sent.append(("patch", namespace, name, uid, condition))
        return "patched"

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:  # the pod is still there
        return {"metadata": {"namespace": namespace, "name": name, "uid": "u-1"}}


@pytest.mark.parametrize("action", ["delete", "evict"])
def test_a_removal_names_the_pod_and_its_uid(action: str) -> None:
    kube = Recorder()
    builders.actuator(kube).remove(Removal(POD, action, 15))  # type: ignore[arg-type]
    assert kube.sent == [(action, "ns", "pod-1", "u-1", 15)]


@pytest.mark.parametrize("action", ["quarantine", "", "Delete"])
def test_any_other_action_is_refused_and_nothing_is_sent(action: str) -> None:
    kube = Recorder()
    with pytest.raises(ValueError, match="is not a removal"):
        builders.actuator(kube).remove(Removal(POD, action, None))  # type: ignore[arg-type]
    assert kube.sent == []


def test_a_gate_change_patches_the_pods_status_with_its_uid() -> None:
    kube = Recorder()
    condition = {"type": "vllm-watchdog.io/engine-healthy", "status": "False"}
    assert builders.actuator(kube).apply(GateChange(POD, condition)) == Applied("done")
    assert kube.sent == [("patch", "ns", "pod-1", "u-1", condition)]


@pytest.mark.parametrize("write", [Removal(POD, "delete", None), GateChange(POD, {"type": "t", "status": "False"})])
def test_a_write_the_fence_holds_back_is_not_sent(write: Removal | GateChange) -> None:
    kube = Recorder()
    door = builders.actuator(kube, fence=lambda _seconds: False)
    applied = door.remove(write) if isinstance(write, Removal) else door.apply(write)
    assert applied.outcome == "fenced" and "not sent" in applied.error
    assert kube.sent == []


class Failing(Recorder):
    def __init__(self, error: KubeError | str) -> None:
        super().__init__()
        self.error = error

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> str:
        if isinstance(self.error, str):
            return self.error
        raise self.error


@pytest.mark.parametrize(("answer", "outcome"), [
    (KubeError("delete pod", 0, "ReadTimeoutError"), "lost"),  # no answer: it may have been applied
    (KubeError("delete pod", 503, "Service Unavailable"), "lost"),
    (KubeError("delete pod", 403, "Forbidden"), "refused"),
    (KubeError("delete pod", 422, "Unprocessable"), "refused"),
    ("deleted", "done"), ("not_found", "not_found"), ("conflict", "conflict"),
])
def test_what_a_removal_came_to_is_one_closed_outcome(answer: KubeError | str, outcome: str) -> None:
    applied = builders.actuator(Failing(answer)).remove(Removal(POD, "delete", None))
    assert applied.outcome == outcome
    if isinstance(answer, KubeError):
        assert (applied.error.startswith(f"answer lost ({answer})" if outcome == "lost" else str(answer)),
                applied.reason) == (True, answer.reason)


@pytest.mark.parametrize(("answer", "outcome", "intent_kept"), [
    ("deleted", "done", True),
    ("applied_then_lost", "done", True),  # the GET after the lost answer finds it gone: applied
    ("lost", "lost", True),  # the pod still there: may still be applied (a 5xx "still processing"): fail closed
    ("refused", "refused", False), ("not_found", "not_found", False),  # a definite "not applied": withdrawn
])
@pytest.mark.parametrize("again", [False, True])
def test_the_removal_protocol_against_the_emulator(api: EmulatorServer, kube_client: KubeClient, answer: str,
                                                   outcome: str, intent_kept: bool, again: bool) -> None:
    """Issue 38: the actuator owns the whole removal protocol: the ledger intent is written AHEAD of the DELETE,
    a lost answer is resolved by a GET, a definite "not applied" withdraws the intent, and a removal sent again
    after a lost answer never withdraws it (the first request may have been applied)."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    pod = target_of(api, seeded["pod"])
    held_at_send: list[list[str]] = []

    def delete(namespace: str, name: str, uid: str, grace: int | None) -> Any:
        held_at_send.append(uids())
        if answer in ("lost", "applied_then_lost"):
            if answer == "applied_then_lost":
                kube_client.delete_pod(namespace, name, uid, grace)
            raise KubeError("delete pod", 504, "Gateway Timeout")
        if answer == "refused":
            raise KubeError("delete pod", 403, "Forbidden")
        return "not_found" if answer == "not_found" else kube_client.delete_pod(namespace, name, uid, grace)

    kube = FakeKube(kube_client, delete_pod=delete, get_pod=kube_client.get_pod)  # the GET after it counted
    api.create_namespace("watchdog")
    door = builders.actuator(kube)
    door.ledger = DeletionLedger(kube, door, "watchdog", "wd-ledger", 600.0, lambda: 1_000.0)

    def uids() -> list[str]:
        entries = door.ledger.read() if door.ledger else None
        return [e.uid for e in entries or []]

    applied = door.remove(Removal(pod, "delete", None), again=again)
    assert applied.outcome == outcome
    assert held_at_send == [[pod.uid]]
    assert uids() == ([pod.uid] if intent_kept or again else [])
    assert kube.calls["get_pod"] == (1 if "lost" in answer else 0)
    if answer == "applied_then_lost":
        assert applied.reason == "Gateway Timeout"  # done, its answer lost: the caller says so
    if answer == "lost":
        assert applied.error.endswith("and the pod is still there")


def test_no_removal_is_sent_without_its_ledger_intent(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    kube = FakeKube(kube_client, delete_pod=lambda *a: "deleted")
    kube.fail["create_config_map"] = KubeError("create configmap", 503, "Service Unavailable")
    api.create_namespace("watchdog")
    door = builders.actuator(kube)
    door.ledger = DeletionLedger(kube, door, "watchdog", "wd-ledger", 600.0, lambda: 1_000.0)
    applied = door.remove(Removal(target_of(api, seeded["pod"]), "delete", None))
    assert (applied.outcome, kube.calls["delete_pod"]) == ("unrecorded", 0)
    assert applied.error.startswith("the deletion ledger configmap watchdog/wd-ledger could not be written")
