"""The deletion ledger against the emulator: written AHEAD of a removal through the actuator (the leadership
fence), read back by a new process with one GET (never an Event LIST), conflicts retried once, an intent withdrawn
only on a definite "not applied", and a corrupt or unreadable ledger keeps the budget unknown (fail closed)."""

from __future__ import annotations

import json

import builders
import pytest
from builders import rails
from fakes import FakeKube

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.controller.budget import restore_budget
from watchdog.controller.ledger import DeletionLedger
from watchdog.core.ledger import DATA_KEY
from watchdog.core.policy import DeletionPolicy
from watchdog.demo.emulator import EmulatorServer

NS = "vllm-stall-watchdog"
NAME = "vllm-stall-watchdog-ledger"


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS)
    return emulator


def ledger(kube: KubeClient | FakeKube, wall: float = 10_000.0, fence: bool = True) -> DeletionLedger:
    return DeletionLedger(kube, builders.actuator(kube, fence=lambda _s: fence), NS, NAME, 600.0, lambda: wall)


def stored(api: EmulatorServer) -> list[dict[str, object]]:
    status, body = api.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{NAME}")
    assert status == 200
    return list(json.loads(body["data"][DATA_KEY]))


def restored(led: DeletionLedger) -> DeletionPolicy:
    policy = DeletionPolicy(rails(deletion_window_seconds=600.0), started=-1e6, budget_known=False)
    assert restore_budget(policy, 100.0, led)
    return policy


def test_written_then_read_back_with_one_get_and_no_event_list(api: EmulatorServer,
                                                               kube_client: KubeClient) -> None:
    assert ledger(kube_client, 9_700.0).intend("ml", "llama-a", "u1")
    assert ledger(kube_client, 9_900.0).intend("ml", "llama-b", "u2")
    assert [e["uid"] for e in stored(api)] == ["u1", "u2"]
    before = len(api.emulator.request_log)
    policy = restored(ledger(kube_client))
    verbs = [(r.verb, r.resource) for r in api.emulator.request_log[before:]]
    assert verbs == [("get", "configmaps")]  # no Event LIST (a full etcd scan on a real API server)
    assert policy.budget_known
    policy.begin_cycle(-1e6, watched=1, bad=0)  # past warm-up
    decision = policy.decide(uid="x", series="s", namespace="other", namespace_mode="enforce", owner=None,
                             pod_age_s=1e6, now=100.0)
    assert decision.rule == "budget"  # the two removals read back use up the default cluster budget of 2


def test_an_intent_is_withdrawn_only_by_its_own_uid(api: EmulatorServer, kube_client: KubeClient) -> None:
    assert ledger(kube_client).intend("ml", "a", "u1") and ledger(kube_client).intend("ml", "b", "u2")
    assert ledger(kube_client).withdraw("u1")
    assert [e["uid"] for e in stored(api)] == ["u2"]


def test_a_conflict_is_retried_once_with_a_fresh_read(api: EmulatorServer, kube_client: KubeClient) -> None:
    assert ledger(kube_client).intend("ml", "a", "u1")
    replaced = {"n": 0}

    def racing_replace(namespace: str, name: str, body: dict[str, object]) -> dict[str, object]:
        replaced["n"] += 1
        if replaced["n"] == 1:  # another replica wrote between our read and our write
            raise KubeError("replace configmap", 409, "Conflict", "the object has been modified")
        return kube_client.replace_config_map(namespace, name, body)

    fake = FakeKube(kube_client, replace_config_map=racing_replace)
    assert ledger(fake).intend("ml", "b", "u2")
    assert replaced["n"] == 2 and [e["uid"] for e in stored(api)] == ["u1", "u2"]


def test_a_missing_ledger_is_an_empty_budget_without_any_event_list(api: EmulatorServer,
                                                                    kube_client: KubeClient) -> None:
    """Every removal is recorded before it is sent, so no ConfigMap means no removal: nothing else is read."""
    before = len(api.emulator.request_log)
    policy = restored(ledger(kube_client))
    assert policy.budget_known and not policy.view(100.0)["budget"]["namespaces"]
    assert [(r.verb, r.resource) for r in api.emulator.request_log[before:]] == [("get", "configmaps")]


@pytest.mark.parametrize("break_it", ["corrupt", "forbidden"])
def test_an_unusable_ledger_keeps_the_budget_unknown_and_is_never_overwritten(api: EmulatorServer,
                                                                              kube_client: KubeClient,
                                                                              break_it: str) -> None:
    """Issue 27 item 8: no fallback to Events (a tenant can forge them); a ledger that cannot be read holds every
    removal back, and a corrupt one is not overwritten (the budget it held would be lost)."""
    if break_it == "corrupt":
        api.create_object(f"/api/v1/namespaces/{NS}/configmaps",
                          {"metadata": {"name": NAME}, "data": {DATA_KEY: "{not json"}})
    fake = FakeKube(kube_client)
    if break_it == "forbidden":
        fake.fail["get_config_map"] = KubeError("get configmap", 403, "Forbidden")
    policy = DeletionPolicy(rails(), budget_known=False)
    before = len(api.emulator.request_log)
    assert not restore_budget(policy, 100.0, ledger(fake))
    assert not policy.budget_known
    assert ("list", "events") not in [(r.verb, r.resource) for r in api.emulator.request_log[before:]]
    assert ledger(fake).intend("ml", "a", "u1") is False
    if break_it == "corrupt":
        _, body = api.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{NAME}")
        assert body["data"][DATA_KEY] == "{not json"


def test_a_failed_write_is_reported_not_raised(api: EmulatorServer, kube_client: KubeClient) -> None:
    fake = FakeKube(kube_client)
    fake.fail["create_config_map"] = KubeError("create configmap", 503, "Service Unavailable")
    assert ledger(fake).intend("ml", "a", "u1") is False


def test_a_standby_writes_no_ledger_entry(api: EmulatorServer, kube_client: KubeClient) -> None:
    before = len(api.emulator.request_log)
    assert ledger(kube_client, fence=False).intend("ml", "a", "u1") is False
    assert [r.verb for r in api.emulator.request_log[before:]] == ["get"]


def test_every_write_ahead_entry_inside_the_window_survives_a_restart(api: EmulatorServer,
                                                                       kube_client: KubeClient) -> None:
    """Issue 36 item 7: with maxDeletions 300, 300 removals recorded through the write-ahead path were read back
    as 256 after a restart, and the 301st pod was deleted inside the window."""
    for i in range(300):
        assert ledger(kube_client, 9_000.0 + i).intend("ml", f"llama-{i}", f"u{i}")
    policy = DeletionPolicy(rails(deletion_window_seconds=600.0, max_deletions=300, max_deletions_per_namespace=300),
                            started=-1e6, budget_known=False)
    assert restore_budget(policy, 100.0, ledger(kube_client, 9_400.0))
    policy.begin_cycle(-1e6, watched=1, bad=0)  # past warm-up
    decision = policy.decide(uid="x", series="s", namespace="other", namespace_mode="enforce", owner=None,
                             pod_age_s=1e6, now=100.0)
    assert decision.rule == "budget" and len(stored(api)) == 300
