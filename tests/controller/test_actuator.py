"""watchdog/controller/actuator.py: a decided removal is a delete or an eviction of exactly the pod named, UID as
its precondition; any other action is refused before anything is sent (never a delete by default); a decided gate
change is a pods/status patch of that pod; a write the leadership fence holds back is not sent; what a write came
to is one closed outcome (Applied), a failed request sorted into lost (may have been applied) or refused."""

from __future__ import annotations

from typing import Any

import builders
import pytest

from watchdog.adapters.kube import KubeError
from watchdog.controller.actuator import Applied, GateChange, Removal
from watchdog.core.model import WatchedPod

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
