"""Issue 27 items 7, 11 and 10 (owner half): the owner walk a tenant steers through its pods' ownerReferences.

A tenant that may create pods (and ReplicaSets) in its own namespace writes ownerReferences freely: the API server
checks only that kind, name and uid are not empty. These tests hold the walk to what the watchdog can verify —
a known kind from a fixed table, in the pod's own namespace, a valid object name, the fetched object's uid equal
to the reference's — against the API emulator over real HTTP, its request log being the record of what was sent.
"""

from __future__ import annotations

from typing import Any

import builders
import pytest
from fakes import FakeKube

from watchdog.adapters.events import MAX_OWNERS_CACHED, OWNER_RETRY_SECONDS, EventRecorder
from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.adapters.metrics import new_metrics
from watchdog.core.model import OwnerRef, WatchedPod
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

A, B = "tenant-a", "tenant-b"


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(A)
    emulator.create_namespace(B)
    return emulator


def target(owner: OwnerRef | None, uid: str = "pod-uid", namespace: str = A) -> WatchedPod:
    return WatchedPod(uid=uid, namespace=namespace, name="llm-0", ip="10.0.0.5", port=8000, path="/metrics",
                      target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=owner)


def ref(obj: dict[str, Any]) -> OwnerRef:
    return OwnerRef(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["uid"])


class Walks:
    """``kube_client`` with every get_object call recorded (api_version, kind, namespace, name)."""

    def __init__(self, kube_client: KubeClient) -> None:
        self.gets: list[tuple[str, str, str, str]] = []

        def spy(*args: Any) -> Any:
            self.gets.append(args)
            return kube_client.get_object(*args)

        self.kube = FakeKube(kube_client, get_object=spy)


def sent(api: EmulatorServer) -> list[str]:
    """Every request path the watchdog sent, in order."""
    return [f"{r.method} {r.path}" + (f"?{r.query}" if r.query else "") for r in api.emulator.request_log]


def owner_events(api: EmulatorServer) -> list[tuple[str, str, str, str]]:
    """(namespace, kind, name, uid) of every Event about an object that is not a Pod, in every namespace."""
    return sorted((e["metadata"]["namespace"], e["involvedObject"]["kind"], e["involvedObject"]["name"],
                   e["involvedObject"].get("uid", "")) for e in api.list_events()
                  if e["involvedObject"]["kind"] != "Pod")


def pod_events(api: EmulatorServer) -> list[tuple[str, str]]:
    return [(e["metadata"]["namespace"], e["involvedObject"]["name"]) for e in api.list_events()
            if e["involvedObject"]["kind"] == "Pod"]


def recorder(kube: Any, **kw: Any) -> EventRecorder:
    return EventRecorder(kube, builders.actuator(kube), new_metrics(), **kw)


def record(api: EmulatorServer, kube: Any, owner: OwnerRef | None) -> list[str]:
    """One pod-and-owner Event write for a pod of tenant-a owned by ``owner``: the requests it sent."""
    events = recorder(kube)
    api.emulator.request_log.clear()
    events.on_pod_and_owner(target(owner), "StalledPodDryRun", "Would delete pod tenant-a/llm-0")
    return sent(api)


def test_a_path_in_the_kind_never_leaves_the_pods_namespace(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Item 7: this kind made the watchdog GET /api/v1/pods (every pod in the cluster, loaded into memory)."""
    owner = OwnerRef("apps/v1", "X/../../../../../../api/v1/pods?probe=", "x", "u-1")
    assert record(api, kube_client, owner) == [f"POST /api/v1/namespaces/{A}/events"]  # the Pod's Event, no GET
    assert pod_events(api) == [(A, "llm-0")] and owner_events(api) == []


def test_another_tenants_replicaset_is_never_read(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Item 7: a kind pointing into tenant-b read its ReplicaSet and wrote its Deployment's name and UID into an
    Event in tenant-a."""
    victim = seed_deployment(api, B, "secret-model", "10.0.0.9", 8000)
    rs = victim["replicaset"]["metadata"]
    owner = OwnerRef("apps/v1", f"X/../../{B}/replicaset", rs["name"], rs["uid"])
    paths = record(api, kube_client, owner)
    assert not [p for p in paths if f"/namespaces/{A}/" not in p], paths
    assert owner_events(api) == []
    assert all(victim["deployment"]["metadata"]["uid"] not in str(e) for e in api.list_events())


@pytest.mark.parametrize("owner", [
    OwnerRef("v1", "Secret", "db-password", "u-1"),  # a real kind, not an owner the watchdog knows
    OwnerRef("v1", "Namespace", B, "u-1"),  # cluster-scoped
    OwnerRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws", "u-1"),  # not in the table
    OwnerRef("apps/v2", "ReplicaSet", "llm-5d4f", "u-1"),  # a known kind under another apiVersion
    OwnerRef("apps/v1", "ReplicaSet", "../../../../api/v1/pods", "u-1"),  # the name as a path
    OwnerRef("apps/v1", "ReplicaSet", "..", "u-1"),
    OwnerRef("apps/v1", "ReplicaSet", "llm?watch=1", "u-1"),
    OwnerRef("apps/v1", "ReplicaSet", "a" * 254, "u-1"),  # longer than an object name can be
    OwnerRef("apps/v1", "ReplicaSet", "llm-5d4f", ""),  # nothing to verify against
])
def test_an_owner_the_watchdog_cannot_verify_is_not_fetched(api: EmulatorServer, kube_client: KubeClient,
                                                            owner: OwnerRef) -> None:
    walks = Walks(kube_client)
    assert record(api, walks.kube, owner) == [f"POST /api/v1/namespaces/{A}/events"]
    assert walks.gets == []
    assert owner_events(api) == []


def test_a_node_owner_gets_no_event_only_the_pod_does(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Item 11: a static pod's mirror (owner kind Node), or a tenant claiming one, made the watchdog write an Event
    with the tenant's text into namespace default. The Pod still gets its Event."""
    paths = record(api, kube_client, OwnerRef("v1", "Node", "gpu-1\nforged line", "node-uid"))
    assert paths == [f"POST /api/v1/namespaces/{A}/events"]
    assert pod_events(api) == [(A, "llm-0")]
    assert owner_events(api) == [] and api.list_events("default") == []


def test_an_owner_whose_uid_differs_gets_no_event(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Item 11: the reference names a real ReplicaSet of the namespace but not its uid: not verified, and the walk
    does not go on to that ReplicaSet's Deployment."""
    seeded = seed_deployment(api, A, "llm", "10.0.0.5", 8000)
    rs = seeded["replicaset"]["metadata"]
    paths = record(api, kube_client, OwnerRef("apps/v1", "ReplicaSet", rs["name"], "forged-uid"))
    assert owner_events(api) == []
    assert pod_events(api) == [(A, "llm-0")]
    assert paths == [f"GET /apis/apps/v1/namespaces/{A}/replicasets/{rs['name']}",
                         f"POST /api/v1/namespaces/{A}/events"]


def test_the_walk_stops_below_an_unverified_parent(api: EmulatorServer, kube_client: KubeClient) -> None:
    """A tenant's own ReplicaSet (verified) naming a Deployment with another uid: the Event goes on the ReplicaSet,
    the highest owner verified, never on the Deployment it only claims."""
    seeded = seed_deployment(api, A, "llm", "10.0.0.5", 8000)
    rs = seeded["replicaset"]
    api.patch_object(f"/apis/apps/v1/namespaces/{A}/replicasets/{rs['metadata']['name']}", {"metadata": {
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": "forged",
                             "controller": True}]}})
    record(api, kube_client, ref(rs))
    assert owner_events(api) == [(A, "ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"])]


def test_a_verified_chain_names_the_top_owner(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, A, "llm", "10.0.0.5", 8000)
    paths = record(api, kube_client, ref(seeded["replicaset"]))
    deploy = seeded["deployment"]["metadata"]
    assert owner_events(api) == [(A, "Deployment", "llm", deploy["uid"])]
    assert [p for p in paths if p.startswith("GET")] == [
        f"GET /apis/apps/v1/namespaces/{A}/replicasets/{seeded['replicaset']['metadata']['name']}",
        f"GET /apis/apps/v1/namespaces/{A}/deployments/llm"]


def test_an_owner_the_watchdog_may_not_read_gets_no_event(api: EmulatorServer, kube_client: KubeClient) -> None:
    """A Job when the ServiceAccount may not read Jobs (403): nothing verified it, so no owner Event."""
    kube = FakeKube(kube_client)
    kube.fail["get_object"] = KubeError("get Job", 403, "Forbidden")
    record(api, kube, OwnerRef("batch/v1", "Job", "batch-infer", "job-uid"))
    assert kube.calls["get_object"] == 1
    assert owner_events(api) == [] and pod_events(api) == [(A, "llm-0")]


def test_one_pod_costs_one_owner_walk_however_many_engines(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Item 10: one pod with 64 frozen engine series made 64 owner walks in one episode."""
    seeded = seed_deployment(api, A, "llm", "10.0.0.5", 8000)
    walks = Walks(kube_client)
    rec = recorder(walks.kube)
    pod = target(ref(seeded["replicaset"]))
    for engine in range(64):
        rec.on_pod_and_owner(pod, "StalledPodDryRun", f"Would delete pod {pod.ref} engine {{{engine}}}")
    assert len(walks.gets) == 2  # ReplicaSet, then Deployment: one walk
    assert len(owner_events(api)) == 64 and len(pod_events(api)) == 64
    rec.forget_pods({"another-pod"})  # the pod is gone: forgotten, a pod of that uid would be walked again
    rec.on_pod_and_owner(pod, "StalledPodDryRun", "again")
    assert len(walks.gets) == 4


def test_a_changed_controller_reference_is_walked_again(api: EmulatorServer, kube_client: KubeClient) -> None:
    first = seed_deployment(api, A, "one", "10.0.0.5", 8000)
    second = seed_deployment(api, A, "two", "10.0.0.6", 8000)
    rec = recorder(kube_client)
    assert rec.top_owner(target(ref(first["replicaset"]))) == ref(first["deployment"])
    assert rec.top_owner(target(ref(second["replicaset"]))) == ref(second["deployment"])


def test_the_owner_cache_is_bounded(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, A, "llm", "10.0.0.5", 8000)
    walks = Walks(kube_client)
    rec = recorder(walks.kube)
    for i in range(MAX_OWNERS_CACHED + 10):
        rec.top_owner(target(ref(seeded["replicaset"]), uid=f"pod-{i}"))
    assert len(rec.owners) == MAX_OWNERS_CACHED


def test_a_transient_failure_is_walked_again_after_a_while(api: EmulatorServer, kube_client: KubeClient) -> None:
    """A 503 or a timeout is not an answer about the owner: retried, but at most once per OWNER_RETRY_SECONDS."""
    seeded = seed_deployment(api, A, "llm", "10.0.0.5", 8000)
    now = [0.0]
    kube = FakeKube(kube_client)
    kube.fail["get_object"] = KubeError("get ReplicaSet", 503, "Service Unavailable")
    rec = recorder(kube, clock=lambda: now[0])
    pod = target(ref(seeded["replicaset"]))
    assert rec.top_owner(pod) is None and rec.top_owner(pod) is None
    assert kube.calls["get_object"] == 1
    del kube.fail["get_object"]
    now[0] += OWNER_RETRY_SECONDS
    assert rec.top_owner(pod) == ref(seeded["deployment"])
