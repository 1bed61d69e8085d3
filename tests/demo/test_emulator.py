"""The kmock 0.8 gaps closed by watchdog.demo.emulator, exercised over real HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from watchdog.demo.emulator import EmulatorClient, EmulatorError, EmulatorServer
from watchdog.demo.emulator.selectors import parse_selector, selector_matches


@pytest.fixture
def srv() -> Iterator[EmulatorServer]:
    with EmulatorServer() as server:
        yield server


def call(srv: EmulatorServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A recorded request (no seeding header), like a client would send."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(srv.base_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    return status, (json.loads(raw) if raw.strip() else None)


def pod(name: str, namespace: str = "ns1", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {"containers": []}}


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in items)


def test_namespaces_are_a_cluster_scoped_resource(srv: EmulatorServer) -> None:
    srv.create_namespace("ml", {"vllm-watchdog": "enabled"})
    srv.create_namespace("web")
    status, body = call(srv, "GET", "/api/v1/namespaces")
    assert status == 200 and body["kind"] == "NamespaceList"
    assert names(body["items"]) == ["ml", "web"]
    status, body = call(srv, "GET", "/api/v1/namespaces?labelSelector=vllm-watchdog%3Denabled")
    assert names(body["items"]) == ["ml"]
    status, body = call(srv, "GET", "/api/v1/namespaces/ml")
    assert status == 200 and body["metadata"]["labels"] == {"vllm-watchdog": "enabled"}
    assert "namespace" not in body["metadata"]
    assert call(srv, "GET", "/api/v1/namespaces/nope")[0] == 404


def test_lists_of_declared_kinds_are_empty_not_404(srv: EmulatorServer) -> None:
    for path in ("/api/v1/pods", "/api/v1/namespaces/x/events", "/apis/apps/v1/namespaces/x/replicasets",
                 "/apis/events.k8s.io/v1/events"):
        status, body = call(srv, "GET", path)
        assert (status, body["items"]) == (200, []), path


def test_label_selector_filters_lists(srv: EmulatorServer) -> None:
    srv.create_pod(pod("a", app="vllm", tier="gpu"))
    srv.create_pod(pod("b", app="vllm"))
    srv.create_pod(pod("c", app="sglang", tier="gpu"))
    srv.create_pod(pod("d", namespace="ns2"))
    cases = {
        "app=vllm": ["a", "b"], "app==vllm": ["a", "b"], "app!=vllm": ["c", "d"], "tier": ["a", "c"],
        "!tier": ["b", "d"], "app in (vllm, sglang)": ["a", "b", "c"], "app notin (vllm)": ["c", "d"],
        "app=vllm,tier=gpu": ["a"], "app in (sglang),!tier": [], "": ["a", "b", "c", "d"],
    }
    for selector, expected in cases.items():
        query = urllib.parse.quote(selector)
        status, body = call(srv, "GET", f"/api/v1/pods?labelSelector={query}")
        assert status == 200 and names(body["items"]) == expected, selector
    status, body = call(srv, "GET", "/api/v1/namespaces/ns1/pods?labelSelector=tier")
    assert names(body["items"]) == ["a", "c"]
    status, body = call(srv, "GET", "/api/v1/pods?labelSelector=%3Dbad")
    assert status == 400 and body["reason"] == "BadRequest"


def test_selector_parser() -> None:
    assert parse_selector("a=b, c!=d,e,!f,g in (x, y),h notin (z)") == [
        ("a", "in", frozenset({"b"})), ("c", "notin", frozenset({"d"})), ("e", "exists", frozenset()),
        ("f", "!exists", frozenset()), ("g", "in", frozenset({"x", "y"})), ("h", "notin", frozenset({"z"})),
    ]
    assert selector_matches(parse_selector("a!=b"), {}) is True
    assert selector_matches(parse_selector("a notin (b)"), {"a": "b"}) is False
    assert selector_matches(parse_selector("a in (b)"), None) is False
    with pytest.raises(ValueError, match="unable to parse"):
        parse_selector("!")


def test_create_stamps_uid_resource_version_and_timestamp(srv: EmulatorServer) -> None:
    status, first = call(srv, "POST", "/api/v1/namespaces/ns1/pods", {"metadata": {"name": "p1"}})
    assert status == 201
    meta = first["metadata"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["namespace"] == "ns1" and first["kind"] == "Pod" and first["apiVersion"] == "v1"
    second = srv.create_pod(pod("p2"))
    assert int(second["metadata"]["resourceVersion"]) == int(meta["resourceVersion"]) + 1
    assert second["metadata"]["uid"] != meta["uid"]
    patched = srv.patch_object("/api/v1/namespaces/ns1/pods/p1", {"metadata": {"labels": {"x": "y"}}})
    assert int(patched["metadata"]["resourceVersion"]) == int(second["metadata"]["resourceVersion"]) + 1
    assert patched["metadata"]["uid"] == meta["uid"]
    generated = srv.create_object("/api/v1/namespaces/ns1/events", {"metadata": {"generateName": "p1."}})
    assert re.fullmatch(r"p1\.[0-9a-f]{10}", generated["metadata"]["name"])
    assert call(srv, "POST", "/api/v1/namespaces/ns1/pods", {"metadata": {}})[0] == 422
    assert call(srv, "POST", "/api/v1/namespaces/ns1/pods", {"metadata": {"name": "p1"}})[0] == 409


def test_delete_honours_uid_precondition(srv: EmulatorServer) -> None:
    created = srv.create_pod(pod("p1"))
    uid = created["metadata"]["uid"]
    status, body = call(srv, "DELETE", "/api/v1/namespaces/ns1/pods/p1", {"preconditions": {"uid": "other"}})
    assert status == 409
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Conflict", 409)
    assert body["message"] == f"Precondition failed: UID in precondition: other, UID in object meta: {uid}"
    assert srv.get_pod("ns1", "p1") is not None
    stale = {"preconditions": {"resourceVersion": "999"}}
    assert call(srv, "DELETE", "/api/v1/namespaces/ns1/pods/p1", stale)[0] == 409
    status, body = call(srv, "DELETE", "/api/v1/namespaces/ns1/pods/p1", {"preconditions": {"uid": uid}})
    assert status == 200 and body["metadata"]["uid"] == uid
    assert srv.get_pod("ns1", "p1") is None
    assert call(srv, "DELETE", "/api/v1/namespaces/ns1/pods/p1", {"preconditions": {"uid": uid}})[0] == 404


def test_put_replaces_with_optimistic_concurrency(srv: EmulatorServer) -> None:
    created = srv.create_object("/apis/coordination.k8s.io/v1/namespaces/ns1/leases",
                                {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}})
    body = {"metadata": {"name": "leader", "resourceVersion": created["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": "b"}}
    status, replaced = call(srv, "PUT", "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/leader", body)
    assert status == 200 and replaced["spec"] == {"holderIdentity": "b"}
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["kind"] == "Lease"
    status, conflict = call(srv, "PUT", "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/leader", body)
    assert status == 409 and conflict["reason"] == "Conflict"
    assert call(srv, "PUT", "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/nope", body)[0] == 404


def test_watch_ends_after_timeout_seconds_and_filters_by_selector(srv: EmulatorServer) -> None:
    srv.create_pod(pod("a", app="vllm"))
    srv.create_pod(pod("b", app="other"))
    started = time.monotonic()
    req = urllib.request.Request(srv.base_url + "/api/v1/pods?watch=true&timeoutSeconds=1&labelSelector=app%3Dvllm")
    with urllib.request.urlopen(req, timeout=5) as resp:
        lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert 0.9 <= time.monotonic() - started < 3
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "a")]


def test_owner_kinds_and_events(srv: EmulatorServer) -> None:
    srv.create_object("/apis/apps/v1/namespaces/ns1/deployments", {"metadata": {"name": "llm"}})
    rs = srv.create_object("/apis/apps/v1/namespaces/ns1/replicasets", {"metadata": {"name": "llm-5d4f"}})
    status, body = call(srv, "GET", "/apis/apps/v1/namespaces/ns1/replicasets/llm-5d4f")
    assert status == 200 and body["metadata"]["uid"] == rs["metadata"]["uid"] and body["kind"] == "ReplicaSet"
    assert call(srv, "GET", "/apis/apps/v1/namespaces/ns1/deployments/llm")[1]["kind"] == "Deployment"
    assert call(srv, "GET", "/apis/apps/v1/namespaces/ns1/statefulsets/llm")[0] == 404
    srv.create_object("/apis/events.k8s.io/v1/namespaces/ns1/events", {"metadata": {"name": "e2"}, "note": "n"})
    assert call(srv, "POST", "/api/v1/namespaces/ns1/events", {"metadata": {"name": "e1"}, "reason": "R"})[0] == 201
    assert [e["reason"] for e in srv.list_events("ns1")] == ["R"]
    assert names(srv.list_events()) == ["e1"]
    assert names(srv.list_objects("/apis/events.k8s.io/v1/namespaces/ns1/events")) == ["e2"]


def test_request_log_counts_client_requests_only(srv: EmulatorServer) -> None:
    srv.create_pod(pod("p1"))  # seeding: not recorded
    assert srv.emulator.request_log == []
    call(srv, "GET", "/api/v1/pods?labelSelector=app%3Dvllm&resourceVersion=0")
    call(srv, "GET", "/api/v1/namespaces/ns1/pods/p1")
    call(srv, "DELETE", "/api/v1/namespaces/ns1/pods/p1", {"preconditions": {"uid": "x"}})
    call(srv, "POST", "/api/v1/namespaces/ns1/events", {"metadata": {"name": "e"}})
    log = srv.emulator.request_log
    assert [(r.method, r.verb, r.resource) for r in log] == [
        ("GET", "list", "pods"), ("GET", "get", "pods"), ("DELETE", "delete", "pods"), ("POST", "create", "events"),
    ]
    assert log[0].path == "/api/v1/pods" and log[0].query == "labelSelector=app%3Dvllm&resourceVersion=0"
    assert srv.emulator.count_requests(resource="pods") == 3
    assert srv.emulator.count_requests(verb="delete", method="delete") == 1
    srv.emulator.request_log.clear()
    assert srv.emulator.count_requests() == 0


def test_seeding_errors_are_one_line(srv: EmulatorServer) -> None:
    srv.create_pod(pod("p1"))
    with pytest.raises(EmulatorError, match=r"^POST /api/v1/namespaces/ns1/pods: HTTP 409: [^\n]*$"):
        srv.create_pod(pod("p1"))


def test_standalone_process() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "watchdog.demo.emulator", "--port", "0"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"emulator listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line
        client = EmulatorClient(match.group(1))
        client.create_namespace("ml")
        assert names(client.list_objects("/api/v1/namespaces")) == ["ml"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_stop_does_not_wait_for_open_watches() -> None:
    server = EmulatorServer()
    server.start()

    def watch() -> None:
        with contextlib.suppress(Exception):  # the stream is cut by the shutdown
            urllib.request.urlopen(server.base_url + "/api/v1/pods?watch=true", timeout=30).read()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 3
    thread.join(5)
    assert not thread.is_alive()


def test_field_selector_filters_lists_and_watches(srv: EmulatorServer) -> None:
    for ns, name, reason, kind in (("ml", "e1", "StalledPodDeleted", "Pod"), ("web", "e2", "StalledPodDeleted", "Node"),
                                   ("ml", "e3", "Scheduled", "Pod")):
        srv.create_object(f"/api/v1/namespaces/{ns}/events", {"metadata": {"name": name}, "reason": reason,
                                                              "involvedObject": {"kind": kind, "name": "x"}})
    srv.create_pod({**pod("p1"), "spec": {"nodeName": "gpu-1", "hostNetwork": True}})
    srv.create_pod(pod("p2"))
    cases = {
        "/api/v1/events?fieldSelector=reason%3DStalledPodDeleted": ["e1", "e2"],
        "/api/v1/events?fieldSelector=reason%3D%3DStalledPodDeleted,involvedObject.kind%3DPod": ["e1"],
        "/api/v1/events?fieldSelector=involvedObject.kind!%3DPod": ["e2"],
        "/api/v1/namespaces/ml/events?fieldSelector=metadata.name%3De3": ["e3"],
        "/api/v1/events?fieldSelector=metadata.namespace%3Dweb": ["e2"],
        "/api/v1/events?fieldSelector=": ["e1", "e2", "e3"],
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-1": ["p1"],
        "/api/v1/pods?fieldSelector=spec.nodeName%3D": ["p2"],  # absent reads as ""
        "/api/v1/pods?fieldSelector=spec.hostNetwork%3Dtrue": ["p1"],  # booleans as the apiserver prints them
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-1&labelSelector=app%3Dx": [],
    }
    for path, expected in cases.items():
        status, body = call(srv, "GET", path)
        assert status == 200 and names(body["items"]) == expected, path
    for bad in ("reason", "a%3Db%3Dc", "%3Dx", "a..b%3Dx"):
        status, body = call(srv, "GET", f"/api/v1/events?fieldSelector={bad}")
        assert status == 400 and "invalid field selector" in body["message"], bad
    watch = "/api/v1/events?watch=true&timeoutSeconds=1&fieldSelector=reason%3DScheduled"
    req = urllib.request.Request(srv.base_url + watch)
    with urllib.request.urlopen(req, timeout=5) as resp:
        lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert [e["object"]["metadata"]["name"] for e in lines] == ["e3"]


def test_nodes_are_cluster_scoped(srv: EmulatorServer) -> None:
    status, created = call(srv, "POST", "/api/v1/nodes", {"metadata": {"name": "gpu-1", "labels": {"gpu": "h100"}}})
    assert status == 201 and created["kind"] == "Node" and "namespace" not in created["metadata"]
    srv.create_object("/api/v1/nodes", {"metadata": {"name": "cpu-1"}})
    assert names(call(srv, "GET", "/api/v1/nodes")[1]["items"]) == ["cpu-1", "gpu-1"]
    assert names(call(srv, "GET", "/api/v1/nodes?labelSelector=gpu")[1]["items"]) == ["gpu-1"]
    status, got = call(srv, "GET", "/api/v1/nodes/gpu-1")
    assert status == 200 and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert call(srv, "GET", "/api/v1/nodes/nope")[0] == 404
    taint = {"key": "a", "effect": "NoSchedule"}
    status, patched = call(srv, "PATCH", "/api/v1/nodes/gpu-1", {"spec": {"taints": [taint]}})
    assert status == 200 and patched["spec"]["taints"] == [taint]
    assert [(r.verb, r.resource) for r in srv.emulator.request_log][-1] == ("patch", "nodes")


def test_patch_with_a_resource_version_is_optimistic(srv: EmulatorServer) -> None:
    created = srv.create_object("/api/v1/nodes", {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a"}]}})
    rv = created["metadata"]["resourceVersion"]
    status, patched = call(srv, "PATCH", "/api/v1/nodes/n", {"metadata": {"resourceVersion": rv},
                                                              "spec": {"taints": [{"key": "a"}, {"key": "b"}]}})
    assert status == 200 and patched["spec"]["taints"] == [{"key": "a"}, {"key": "b"}]  # lists are replaced
    assert int(patched["metadata"]["resourceVersion"]) == int(rv) + 1
    assert patched["metadata"]["uid"] == created["metadata"]["uid"]
    status, body = call(srv, "PATCH", "/api/v1/nodes/n", {"metadata": {"resourceVersion": rv}, "spec": {"taints": []}})
    assert (status, body["reason"], body["code"]) == (409, "Conflict", 409)
    assert "the object has been modified" in body["message"]
    assert call(srv, "GET", "/api/v1/nodes/n")[1]["spec"]["taints"] == [{"key": "a"}, {"key": "b"}]
    assert call(srv, "PATCH", "/api/v1/nodes/nope", {"metadata": {"resourceVersion": rv}})[0] == 404
    status, plain = call(srv, "PATCH", "/api/v1/nodes/n", {"metadata": {"labels": {"x": "y"}}})  # no rv: applies
    assert status == 200 and plain["spec"]["taints"] == [{"key": "a"}, {"key": "b"}]


def eviction(name: str, uid: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if uid is not None:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


def test_eviction_subresource(srv: EmulatorServer) -> None:
    uid = srv.create_pod(pod("p1"))["metadata"]["uid"]
    srv.create_pod(pod("p2"))
    path = "/api/v1/namespaces/ns1/pods/p1/eviction"
    status, body = call(srv, "POST", path, eviction("p1", "other-uid"))
    assert status == 409 and body["reason"] == "Conflict" and "Precondition failed: UID" in body["message"]
    srv.emulator.eviction_blocked = {"ns1/p1"}
    status, body = call(srv, "POST", path, eviction("p1", uid))
    assert (status, body["kind"], body["reason"], body["code"]) == (429, "Status", "TooManyRequests", 429)
    assert "disruption budget" in body["message"] and body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert srv.get_pod("ns1", "p1") is not None
    srv.emulator.eviction_blocked = True
    assert call(srv, "POST", "/api/v1/namespaces/ns1/pods/p2/eviction", eviction("p2"))[0] == 429
    srv.emulator.eviction_blocked = False
    assert call(srv, "POST", path, eviction("p2", uid))[0] == 400  # body names another pod
    status, body = call(srv, "POST", path, eviction("p1", uid))
    assert (status, body["kind"], body["status"]) == (201, "Status", "Success")
    assert srv.get_pod("ns1", "p1") is None and srv.get_pod("ns1", "p2") is not None
    assert call(srv, "POST", path, eviction("p1", uid))[0] == 404
    assert call(srv, "POST", "/api/v1/namespaces/ns1/pods/p2/eviction", eviction("p2"))[0] == 201  # no precondition
    assert [r.verb for r in srv.emulator.request_log] == ["evict"] * 7
    assert srv.emulator.count_requests(verb="delete") == 0


def test_eviction_of_a_pod_with_finalizers_marks_it_terminating(srv: EmulatorServer) -> None:
    srv.create_pod({**pod("p1"), "metadata": {"name": "p1", "namespace": "ns1", "finalizers": ["x/y"]}})
    assert call(srv, "POST", "/api/v1/namespaces/ns1/pods/p1/eviction", eviction("p1"))[0] == 201
    stored = srv.get_pod("ns1", "p1")
    assert stored is not None and stored["metadata"]["deletionTimestamp"]


def test_served_requests_do_not_pile_up_in_kmock(srv: EmulatorServer) -> None:
    for _ in range(50):
        call(srv, "GET", "/api/v1/pods")
    assert len(srv.emulator.request_log) == 50
    assert srv.emulator._requests == [] and all(not getattr(p, "_requests", []) for p in srv.emulator._payloads)
