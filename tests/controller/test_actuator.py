"""watchdog/controller/actuator.py: a removal is a delete or an eviction of exactly the pod named, UID as its
precondition; any other action is refused before anything is sent (never a delete by default)."""

from __future__ import annotations

from typing import Any

import builders
import pytest

from watchdog.core.model import WatchedPod

POD = WatchedPod(uid="u-1", namespace="ns", name="pod-1", ip="10.0.0.1", port=8000, path="/metrics",
                 target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


class Recorder:
    """The two removal calls of a KubeApi, recorded."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> str:
        self.sent.append(("delete", namespace, name, uid, grace_period_s))
        return "deleted"

    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> str:
        self.sent.append(("evict", namespace, name, uid, grace_period_s))
        return "evicted"


@pytest.mark.parametrize("action", ["delete", "evict"])
def test_a_removal_names_the_pod_and_its_uid(action: str) -> None:
    kube = Recorder()
    builders.actuator(kube).remove_pod(POD, action, 15)  # type: ignore[arg-type]
    assert kube.sent == [(action, "ns", "pod-1", "u-1", 15)]


@pytest.mark.parametrize("action", ["quarantine", "", "Delete"])
def test_any_other_action_is_refused_and_nothing_is_sent(action: str) -> None:
    kube = Recorder()
    with pytest.raises(ValueError, match="is not a removal"):
        builders.actuator(kube).remove_pod(POD, action, None)  # type: ignore[arg-type]
    assert kube.sent == []
