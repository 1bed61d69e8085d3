"""The deletion budget read back after a restart or a leader change: from the deletion ledger only, merged with
what the process already knows; never from Events (a tenant allowed to create Events could forge them); without a
ledger, one deletion window held back (emulator over HTTP; not a cluster)."""

from __future__ import annotations

import datetime as dt
import time

import builders
from builders import rails

from watchdog.adapters.kube import KubeClient
from watchdog.controller.budget import restore_budget
from watchdog.controller.ledger import DeletionLedger
from watchdog.core.events import event_body
from watchdog.core.policy import DeletionPolicy
from watchdog.demo.emulator import EmulatorServer

NOW = 5000.0
WD = "vllm-stall-watchdog"


def forge(api: EmulatorServer, namespace: str, name: str) -> None:
    """What a tenant with the built-in `edit` role can write: a StalledPodDeleted Event that says it is ours."""
    body = event_body(namespace, {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": name}, "StalledPodDeleted",
                      "m", "i", dt.datetime.now(dt.UTC))
    body["reportingComponent"] = body["source"]["component"] = WD
    api.create_object(f"/api/v1/namespaces/{namespace}/events", body)


def decide(policy: DeletionPolicy, namespace: str, now: float = NOW) -> str:
    policy.begin_cycle(-1e9, watched=1, bad=0)
    return policy.decide(uid="x", series="s", namespace=namespace, namespace_mode="enforce", owner=None,
                         pod_age_s=1e9, now=now).rule


def test_forged_events_never_use_up_the_budget(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    """Issue 27 item 8: two forged Events in tenant-a; tenant-b's wedge must not be held back by rule budget."""
    emulator.create_namespace(WD)
    forge(emulator, "tenant-a", "p1")
    forge(emulator, "tenant-a", "p2")
    policy = DeletionPolicy(rails(max_deletions=2), started=-1e9, budget_known=False)
    led = DeletionLedger(kube_client, builders.actuator(kube_client), WD, f"{WD}-ledger", 600.0, time.time)
    assert restore_budget(policy, NOW, led)
    assert decide(policy, "tenant-b") == "enforce"
    assert emulator.emulator.count_requests(verb="list", resource="events") == 0


def test_a_restore_merges_with_what_the_process_knows() -> None:
    """Issue 27 item 13: a leadership blip right after a removal whose ledger write never landed must not replace
    the in-memory charge with the (empty) ledger."""
    policy = DeletionPolicy(rails(max_deletions=5, max_deletions_per_namespace=1), started=-1e9)
    policy.record_deletion(NOW - 10, uid="u1", namespace="a", owner=None)
    policy.forget_budget()  # stepped down and re-acquired the Lease
    assert decide(policy, "a") == "budget_unknown"
    policy.restore([])  # the ledger read back empty
    assert decide(policy, "a") == "namespace_budget"
    policy.restore([(NOW - 5, "a", "u1"), (NOW - 5, "b", "u2")])  # the same removal read back counts once
    assert policy.view(NOW)["budget"]["namespaces"] == {"a": {"used": 1, "left": 0}, "b": {"used": 1, "left": 0}}


def test_without_a_ledger_one_deletion_window_is_held_back() -> None:
    policy = DeletionPolicy(rails(deletion_window_seconds=600.0), started=-1e9, budget_known=False)
    assert restore_budget(policy, NOW, None)
    assert decide(policy, "a") == "budget_unknown"
    assert decide(policy, "a", NOW + 599) == "budget_unknown"
    assert decide(policy, "a", NOW + 600) == "enforce"
