"""The deletion ledger against the emulator: written after a deletion, read back by a new process (one GET,
no Event LIST), conflicts retried once, and a missing, corrupt or forbidden ledger falls back to Events."""

from __future__ import annotations

import json

import pytest
from fakes import FakeKube

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.controller.budget import restore_budget
from watchdog.controller.ledger import DeletionLedger
from watchdog.core.ledger import DATA_KEY
from watchdog.core.policy import DeletionPolicy, Rails
from watchdog.demo.emulator import EmulatorServer

NS = "vllm-stall-watchdog"
NAME = "vllm-stall-watchdog-ledger"


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS)
    return emulator


def ledger(kube: KubeClient | FakeKube, wall: float = 10_000.0) -> DeletionLedger:
    return DeletionLedger(kube, NS, NAME, 600.0, lambda: wall)


def stored(api: EmulatorServer) -> list[dict[str, object]]:
    status, body = api.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{NAME}")
    assert status == 200
    return list(json.loads(body["data"][DATA_KEY]))


def restored(kube: KubeClient | FakeKube, led: DeletionLedger | None, namespaces: set[str]) -> DeletionPolicy:
    policy = DeletionPolicy(Rails(deletion_window_seconds=600.0), started=-1e6, budget_known=False)
    assert restore_budget(kube, policy, 100.0, 10_000.0, namespaces, led)
    return policy


def test_written_then_read_back_with_one_get_and_no_event_list(api: EmulatorServer,
                                                               kube_client: KubeClient) -> None:
    assert ledger(kube_client, 9_700.0).record("ml", "llama-a", "u1")
    assert ledger(kube_client, 9_900.0).record("ml", "llama-b", "u2")
    assert [e["uid"] for e in stored(api)] == ["u1", "u2"]
    before = len(api.emulator.request_log)
    policy = restored(kube_client, ledger(kube_client), {"ml"})
    verbs = [(r.verb, r.resource) for r in api.emulator.request_log[before:]]
    assert verbs == [("get", "configmaps")]  # no Event LIST (a full etcd scan on a real API server)
    assert policy.budget_known
    policy.begin_cycle(-1e6, watched=1, bad=0)  # past warm-up
    decision = policy.decide(uid="x", series="s", namespace="other", namespace_mode="enforce", owner=None,
                             pod_age_s=1e6, now=100.0)
    assert decision.rule == "budget"  # the two deletions read back use up the default cluster budget of 2


def test_a_conflict_is_retried_once_with_a_fresh_read(api: EmulatorServer, kube_client: KubeClient) -> None:
    assert ledger(kube_client).record("ml", "a", "u1")
    replaced = {"n": 0}

    def racing_replace(namespace: str, name: str, body: dict[str, object]) -> dict[str, object]:
        replaced["n"] += 1
        if replaced["n"] == 1:  # another replica wrote between our read and our write
            raise KubeError("replace configmap", 409, "Conflict", "the object has been modified")
        return kube_client.replace_config_map(namespace, name, body)

    fake = FakeKube(kube_client, replace_config_map=racing_replace)
    assert ledger(fake).record("ml", "b", "u2")
    assert replaced["n"] == 2 and [e["uid"] for e in stored(api)] == ["u1", "u2"]


@pytest.mark.parametrize("break_it", ["missing", "corrupt", "forbidden"])
def test_an_unusable_ledger_falls_back_to_own_events(api: EmulatorServer, kube_client: KubeClient,
                                                     break_it: str) -> None:
    if break_it == "corrupt":
        api.create_object(f"/api/v1/namespaces/{NS}/configmaps",
                          {"metadata": {"name": NAME}, "data": {DATA_KEY: "{not json"}})
    fake = FakeKube(kube_client)
    if break_it == "forbidden":
        fake.fail["get_config_map"] = KubeError("get configmap", 403, "Forbidden")
    before = len(api.emulator.request_log)
    restored(fake, ledger(fake), {"ml"})
    assert ("list", "events") in [(r.verb, r.resource) for r in api.emulator.request_log[before:]]


def test_a_failed_write_is_reported_not_raised(api: EmulatorServer, kube_client: KubeClient) -> None:
    fake = FakeKube(kube_client)
    fake.fail["create_config_map"] = KubeError("create configmap", 403, "Forbidden")
    assert ledger(fake).record("ml", "a", "u1") is False
