"""The deletion budget read back from this watchdog's own Events (emulator over HTTP; not a cluster)."""

from __future__ import annotations

import datetime as dt
import time

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.controller.budget import restore_budget
from watchdog.core.events import event_body
from watchdog.core.policy import DeletionPolicy, Rails
from watchdog.demo.emulator import EmulatorServer

NOW = 5000.0


def record(api: EmulatorServer, namespace: str, name: str, age_s: float, *, reason: str = "StalledPodDeleted",
           kind: str = "Pod", component: str = "vllm-stall-watchdog") -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age_s))
    body = event_body(namespace, {"apiVersion": "v1", "kind": kind, "name": name, "uid": name}, reason, "m", "i",
                      dt.datetime.now(dt.UTC))
    body["lastTimestamp"] = body["firstTimestamp"] = stamp
    body["reportingComponent"] = body["source"]["component"] = component
    api.create_object(f"/api/v1/namespaces/{namespace}/events", body)


def deletions(policy: DeletionPolicy) -> int:
    return sum(1 for _ in policy._deletions)


def test_restores_own_recent_pod_deletions_in_watched_namespaces(emulator: EmulatorServer,
                                                                  kube_client: KubeClient) -> None:
    record(emulator, "a", "p1", 60)
    record(emulator, "a", "p2", 900)  # older than the 600 s budget window
    record(emulator, "b", "p3", 60)  # another shard's namespace
    record(emulator, "a", "deploy", 60, kind="Deployment")  # the owner's copy of a deletion Event
    record(emulator, "a", "p4", 60, reason="StalledPodDryRun")
    record(emulator, "a", "p5", 60, component="someone-else")
    policy = DeletionPolicy(Rails(deletion_window_seconds=600), budget_known=False)
    assert restore_budget(kube_client, policy, NOW, time.time(), {"a"})
    assert deletions(policy) == 1
    assert emulator.emulator.count_requests(verb="list", resource="events") == 1


def test_unreadable_events_keep_the_budget_unknown(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    class Broken:
        def list_events(self, field_selector: str) -> list[dict]:
            raise KubeError("list events", 403, "Forbidden")

    policy = DeletionPolicy(budget_known=False)
    assert not restore_budget(Broken(), policy, NOW, time.time(), {"a"})  # type: ignore[arg-type]
    assert not policy.budget_known and deletions(policy) == 0
