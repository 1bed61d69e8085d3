"""KubeClient against the Kubernetes API emulator over real HTTP."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from watchdog.adapters import kube as kube_module
from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings, TooLarge
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.simpod import SimPod


@pytest.fixture
def srv() -> Iterator[EmulatorServer]:
    with EmulatorServer() as server:
        server.create_namespace("ml", {"vllm-watchdog": "enabled"})
        server.create_namespace("web")
        yield server


@pytest.fixture
def kube(srv: EmulatorServer) -> KubeClient:
    return KubeClient.from_settings(KubeSettings(host=srv.base_url, request_timeout_s=5))


def pod(name: str, namespace: str = "ml", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels},
            "status": {"podIP": "127.0.0.2", "phase": "Running"}}


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(f'{i["metadata"].get("namespace", "")}/{i["metadata"]["name"]}'.lstrip("/") for i in items)


def test_lists_with_selectors_in_one_request_each(srv: EmulatorServer, kube: KubeClient) -> None:
    srv.create_pod(pod("llm-0", app="vllm"))
    srv.create_pod(pod("llm-1", namespace="web", app="vllm"))
    srv.create_pod(pod("front", namespace="web", app="nginx"))
    assert names(kube.list_pods("app=vllm")) == ["ml/llm-0", "web/llm-1"]
    assert names(kube.list_pods("")) == ["ml/llm-0", "web/front", "web/llm-1"]
    assert names(kube.list_namespaces("vllm-watchdog=enabled")) == ["ml"]
    assert kube.api_requests == 3
    log = srv.emulator.request_log
    assert [(r.method, r.path) for r in log] == [("GET", "/api/v1/pods"), ("GET", "/api/v1/pods"),
                                                 ("GET", "/api/v1/namespaces")]
    assert "resourceVersion=0" in log[0].query and "labelSelector=app%3Dvllm" in log[0].query
    assert log[0].query.count("&") == 1  # nothing else: no limit, no continue
    first = kube.list_pods("app=vllm")[0]
    assert first["metadata"]["uid"] and first["status"]["podIP"] == "127.0.0.2"  # plain API JSON dicts


def test_get_pod(srv: EmulatorServer, kube: KubeClient) -> None:
    created = srv.create_pod(pod("llm-0"))
    got = kube.get_pod("ml", "llm-0")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert kube.get_pod("ml", "missing") is None
    assert kube.api_requests == 2


def test_the_api_servers_clock_is_read_from_every_answers_date(srv: EmulatorServer, kube: KubeClient) -> None:
    """Issue 36 item 8: the deletion ledger's clock is the API server's (its answers' Date, whole seconds), a 404
    included; unknown before the first answer."""
    assert kube.server_time() is None
    assert kube.get_pod("default", "none") is None  # a 404 is dated too
    first = kube.server_time()
    assert first is not None and abs(first - time.time()) < 1.5
    time.sleep(0.2)
    later = kube.server_time()
    assert later is not None and later - first == pytest.approx(0.2, abs=0.1)  # moves on the monotonic clock


def test_delete_with_uid_precondition(srv: EmulatorServer, kube: KubeClient) -> None:
    uid = srv.create_pod(pod("llm-0"))["metadata"]["uid"]
    assert kube.delete_pod("ml", "llm-0", "not-the-uid", grace_period_s=30) == "conflict"
    assert srv.get_pod("ml", "llm-0") is not None
    assert kube.delete_pod("ml", "llm-0", uid, grace_period_s=None) == "deleted"
    assert srv.get_pod("ml", "llm-0") is None
    assert kube.delete_pod("ml", "llm-0", uid, grace_period_s=None) == "not_found"
    assert kube.api_requests == 3 and srv.emulator.count_requests(verb="delete") == 3


def test_delete_of_a_recreated_pod_is_a_conflict(srv: EmulatorServer, kube: KubeClient) -> None:
    old_uid = srv.create_pod(pod("llm-0"))["metadata"]["uid"]
    assert kube.delete_pod("ml", "llm-0", old_uid, grace_period_s=0) == "deleted"
    srv.create_pod(pod("llm-0"))  # a StatefulSet re-creates the same name with a new uid
    assert kube.delete_pod("ml", "llm-0", old_uid, grace_period_s=0) == "conflict"
    assert srv.get_pod("ml", "llm-0") is not None


def test_create_event_is_visible(srv: EmulatorServer, kube: KubeClient) -> None:
    event = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "llm-0.", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "llm-0", "uid": "u1"},
        "reason": "EngineStalled", "message": "running=21 for 300s, tokens frozen", "type": "Warning",
        "source": {"component": "vllm-stall-watchdog"},
    }
    kube.create_event("ml", event)
    events = srv.list_events("ml")
    assert len(events) == 1
    assert events[0]["reason"] == "EngineStalled" and events[0]["involvedObject"]["uid"] == "u1"
    assert events[0]["metadata"]["name"].startswith("llm-0.")


def test_get_object_for_owner_chain(srv: EmulatorServer, kube: KubeClient) -> None:
    deploy = srv.create_object("/apis/apps/v1/namespaces/ml/deployments", {"metadata": {"name": "llm"}})
    srv.create_object("/apis/apps/v1/namespaces/ml/replicasets", {"metadata": {"name": "llm-5d4f", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": deploy["metadata"]["uid"]}]}})
    rs = kube.get_object("apps/v1", "ReplicaSet", "ml", "llm-5d4f")
    assert rs is not None and rs["metadata"]["ownerReferences"][0]["name"] == "llm"
    owner = kube.get_object("apps/v1", "Deployment", "ml", "llm")
    assert owner is not None and owner["metadata"]["uid"] == deploy["metadata"]["uid"]
    assert kube.get_object("apps/v1", "StatefulSet", "ml", "llm") is None
    assert [r.path for r in srv.emulator.request_log] == [
        "/apis/apps/v1/namespaces/ml/replicasets/llm-5d4f", "/apis/apps/v1/namespaces/ml/deployments/llm",
        "/apis/apps/v1/namespaces/ml/statefulsets/llm",
    ]


@pytest.mark.parametrize(("api_version", "kind", "namespace", "name"), [
    ("apps/v1", "X/../../../../../../api/v1/pods?probe=", "ml", "x"),  # issue 27 item 7: GET /api/v1/pods
    ("apps/v1", "X/../../namespaces/web/replicaset", "ml", "llm"),  # another namespace's ReplicaSet
    ("apps/v1", "ReplicaSet", "ml", "../../../../api/v1/pods"),
    ("apps/v1", "ReplicaSet", "ml", ".."),
    ("apps/v1", "ReplicaSet", "ml", "llm?watch=true"),
    ("apps/v1", "ReplicaSet", "ml", "llm/x"),
    ("apps/v1", "ReplicaSet", "../web", "llm"),
    ("apps/v1", "ReplicaSet", "", "llm"),  # every owner is namespaced: no cluster-wide path
    ("apps/../v1", "ReplicaSet", "ml", "llm"),
    ("v1", "Secret", "ml", "db-password"),  # a kind outside the owner table
    ("v1", "Namespace", "", "ml"),
    ("v1", "Node", "", "gpu-1"),
])
def test_tenant_text_never_reaches_a_url(srv: EmulatorServer, kube: KubeClient, api_version: str, kind: str,
                                         namespace: str, name: str) -> None:
    """get_object builds its URL from the fixed owner table and validated names only; anything else is refused
    before a request is sent."""
    srv.emulator.request_log.clear()
    with pytest.raises(ValueError, match="not a known owner"):
        kube.get_object(api_version, kind, namespace, name)
    assert srv.emulator.request_log == []


def test_errors_are_one_line_and_bounded() -> None:
    refused = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:1", request_timeout_s=2))
    with pytest.raises(KubeError, match=r"^list pods 'app=vllm': .*Error") as info:
        refused.list_pods("app=vllm")
    assert "\n" not in str(info.value) and info.value.status == 0
    with SimPod("127.0.0.2", 0, "hang") as hung:  # accepts the connection, never answers
        kube = KubeClient.from_settings(KubeSettings(host=hung.url, request_timeout_s=0.5))
        started = time.monotonic()
        with pytest.raises(KubeError, match=r"^delete pod ml/llm-0: .*(Timeout|timed out)"):
            kube.delete_pod("ml", "llm-0", "uid", grace_period_s=None)
        assert time.monotonic() - started < 0.95  # one attempt only: no retry of the DELETE
        assert kube.api_requests == 1


def test_http_errors_keep_their_status(srv: EmulatorServer, kube: KubeClient) -> None:
    with pytest.raises(KubeError, match=r"^list pods '=bad': HTTP 400 Bad Request: unable to parse") as info:
        kube.list_pods("=bad")
    assert info.value.status == 400


def test_from_settings_with_kubeconfig(srv: EmulatorServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: emu, cluster: {{server: "{srv.base_url}"}}}}]
users: [{{name: u, user: {{token: t0ken}}}}]
contexts: [{{name: emu, context: {{cluster: emu, user: u}}}}]
current-context: emu
""")
    kube = KubeClient.from_settings(KubeSettings(kubeconfig=str(kubeconfig), context="emu"))
    assert names(kube.list_namespaces("")) == ["ml", "web"]
    with pytest.raises(KubeError, match=r"^load configuration: .*nope"):
        KubeClient.from_settings(KubeSettings(kubeconfig=str(tmp_path / "nope")))


def test_from_settings_without_any_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeError, match=r"^load configuration: not in a cluster \(.*\) and no usable kubeconfig"):
        KubeClient.from_settings(KubeSettings())


def test_evict_pod_results(srv: EmulatorServer, kube: KubeClient) -> None:
    uid = srv.create_pod(pod("llm-0"))["metadata"]["uid"]
    srv.create_pod(pod("llm-1"))
    assert kube.evict_pod("ml", "llm-0", "not-the-uid", grace_period_s=None) == "conflict"
    srv.emulator.eviction_blocked = {"ml/llm-0"}  # a PodDisruptionBudget says no
    assert kube.evict_pod("ml", "llm-0", uid, grace_period_s=None) == "blocked"
    assert srv.get_pod("ml", "llm-0") is not None
    srv.emulator.eviction_blocked = set()
    srv.emulator.several_pdbs = {"ml/llm-0"}  # the API server's 500: a refusal, not a lost answer
    assert kube.evict_pod("ml", "llm-0", uid, grace_period_s=None) == "several_pdbs"
    srv.emulator.several_pdbs = set()
    assert kube.evict_pod("ml", "llm-0", uid, grace_period_s=30) == "evicted"
    assert srv.get_pod("ml", "llm-0") is None and srv.get_pod("ml", "llm-1") is not None
    assert kube.evict_pod("ml", "llm-0", uid, grace_period_s=30) == "not_found"
    log = srv.emulator.request_log
    assert {(r.method, r.path, r.verb) for r in log} == {("POST", "/api/v1/namespaces/ml/pods/llm-0/eviction", "evict")}
    assert kube.api_requests == 5 and len(log) == 5  # each sent once, none retried
    srv.emulator.eviction_blocked = True  # every eviction
    other = srv.get_pod("ml", "llm-1")
    assert other is not None and kube.evict_pod("ml", "llm-1", other["metadata"]["uid"], None) == "blocked"
    refused = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:1", request_timeout_s=2))
    with pytest.raises(KubeError, match=r"^evict pod ml/llm-1: ") as info:  # anything else raises
        refused.evict_pod("ml", "llm-1", "uid", grace_period_s=None)
    assert info.value.status == 0 and refused.api_requests == 1


def test_eviction_body_is_policy_v1_with_uid_precondition(srv: EmulatorServer, kube: KubeClient,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []
    original = kube._core.create_namespaced_pod_eviction

    def spy(name: str, namespace: str, body: Any, **kw: Any) -> Any:
        sent.append(body)
        return original(name, namespace, body, **kw)

    monkeypatch.setattr(kube._core, "create_namespaced_pod_eviction", spy)
    uid = srv.create_pod(pod("llm-0"))["metadata"]["uid"]
    assert kube.evict_pod("ml", "llm-0", uid, grace_period_s=7) == "evicted"
    assert sent == [{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "llm-0", "namespace": "ml"},
                     "deleteOptions": {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid},
                                       "gracePeriodSeconds": 7}}]


LEASE = {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}


def test_lease_get_create_replace_and_conflicts(srv: EmulatorServer, kube: KubeClient) -> None:
    assert kube.get_lease("ml", "leader") is None
    created = kube.create_lease("ml", LEASE)
    assert created["metadata"]["namespace"] == "ml" and created["spec"]["holderIdentity"] == "a"
    with pytest.raises(KubeError, match=r"^create lease ml/leader: HTTP 409") as info:
        kube.create_lease("ml", LEASE)
    assert info.value.status == 409
    got = kube.get_lease("ml", "leader")
    assert got is not None and got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    replaced = kube.replace_lease("ml", "leader", {**got, "spec": {"holderIdentity": "b"}})
    assert replaced["spec"] == {"holderIdentity": "b"} and replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
    with pytest.raises(KubeError, match=r"^replace lease ml/leader: HTTP 409") as info:
        kube.replace_lease("ml", "leader", {**got, "spec": {"holderIdentity": "c"}})  # stale resourceVersion
    assert info.value.status == 409
    assert kube.get_lease("ml", "leader")["spec"] == {"holderIdentity": "b"}  # type: ignore[index]
    with pytest.raises(KubeError) as info:
        kube.replace_lease("ml", "nope", {**got, "metadata": {"name": "nope"}})
    assert info.value.status == 404
    assert [(r.method, r.verb) for r in srv.emulator.request_log] == [
        ("GET", "get"), ("POST", "create"), ("POST", "create"), ("GET", "get"), ("PUT", "replace"),
        ("PUT", "replace"), ("GET", "get"), ("PUT", "replace")]


def test_node_get_and_patch_taints_with_resource_version(srv: EmulatorServer, kube: KubeClient) -> None:
    existing = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    srv.create_object("/api/v1/nodes", {"metadata": {"name": "gpu-1", "labels": {"zone": "a"}},
                                        "spec": {"taints": [existing], "podCIDR": "10.0.0.0/24"}})
    assert kube.get_node("nope") is None
    node = kube.get_node("gpu-1")
    assert node is not None and node["kind"] == "Node" and "namespace" not in node["metadata"]
    ours = {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}
    patched = kube.patch_node_taints("gpu-1", [existing, ours], node["metadata"]["resourceVersion"])
    assert patched["spec"] == {"taints": [existing, ours], "podCIDR": "10.0.0.0/24"}
    assert patched["metadata"]["labels"] == {"zone": "a"}
    with pytest.raises(KubeError, match=r"^patch node gpu-1 taints: HTTP 409 Conflict") as info:
        kube.patch_node_taints("gpu-1", [existing], node["metadata"]["resourceVersion"])  # stale
    assert info.value.status == 409
    assert kube.get_node("gpu-1")["spec"]["taints"] == [existing, ours]  # type: ignore[index]
    with pytest.raises(ValueError, match="resourceVersion"):
        kube.patch_node_taints("gpu-1", [], "")
    patch = [r for r in srv.emulator.request_log if r.method == "PATCH"]
    assert [r.path for r in patch] == ["/api/v1/nodes/gpu-1"] * 2


def test_node_taints_are_sent_as_a_json_merge_patch(srv: EmulatorServer, kube: KubeClient,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rv = srv.create_object("/api/v1/nodes", {"metadata": {"name": "gpu-1"}})["metadata"]["resourceVersion"]
    calls: list[tuple[Any, dict[str, Any]]] = []
    original = kube._core.patch_node

    def spy(name: str, body: Any, **kw: Any) -> Any:
        calls.append((body, kw))
        return original(name, body, **kw)

    monkeypatch.setattr(kube._core, "patch_node", spy)
    taint = {"key": "k", "effect": "NoSchedule"}
    kube.patch_node_taints("gpu-1", [taint], rv)
    assert calls[0][0] == {"metadata": {"resourceVersion": rv}, "spec": {"taints": [taint]}}
    assert calls[0][1]["_content_type"] == "application/merge-patch+json"


def answering(status: int, body: dict[str, Any]) -> tuple[http.server.ThreadingHTTPServer, list[tuple[str, bytes]]]:
    """A loopback API server answering every PATCH with ``status`` and ``body``; the (path, body) it got."""
    seen: list[tuple[str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            seen.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, seen


UID_IMMUTABLE = {"kind": "Status", "code": 422, "reason": "Invalid",
                 "message": 'Pod "p" is invalid: metadata.uid: Invalid value: "u-1": field is immutable'}


@pytest.mark.parametrize(("status", "body", "result"), [
    (200, {"kind": "Pod"}, "patched"),
    (404, {"kind": "Status", "code": 404, "message": 'pods "p" not found'}, "not_found"),
    (409, {"kind": "Status", "code": 409, "message": "conflict"}, "conflict"),
    (422, UID_IMMUTABLE, "conflict"),  # the name now belongs to another pod
    (422, {"kind": "Status", "code": 422, "message": "status.conditions[0].status: Unsupported value"}, None),
])
def test_the_gate_condition_patch_carries_the_uid(status: int, body: dict[str, Any], result: str | None) -> None:
    server, seen = answering(status, body)
    try:
        kube = KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{server.server_address[1]}"))
        condition = {"type": "vllm-watchdog.io/engine-progressing", "status": "False"}
        if result is None:
            with pytest.raises(KubeError, match="Unsupported value"):
                kube.patch_pod_condition("ml", "p", "u-1", condition)
        else:
            assert kube.patch_pod_condition("ml", "p", "u-1", condition) == result
    finally:
        server.shutdown()
    [(path, sent)] = seen
    assert path == "/api/v1/namespaces/ml/pods/p/status"
    assert json.loads(sent) == {"metadata": {"uid": "u-1"}, "status": {"conditions": [condition]}}


def streaming(body: bytes) -> http.server.ThreadingHTTPServer:
    """A loopback API server answering every GET with ``body`` as the API server sends a large LIST: chunked (16 KiB
    pieces), no Content-Length; it stops when the client hangs up."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for at in range(0, len(body), 16384):
                    piece = body[at:at + 16384]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client gave the answer up
                self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


def test_a_list_page_is_read_no_further_than_its_byte_cap(bytes_read: Counter[object]) -> None:
    """A tenant sizes its pods (256 KiB of annotations each): a LIST page is read in chunks and given up as soon as
    it exceeds the cap it is given, never more than the cap + one chunk; within the cap it is read whole."""
    blob = {"annotations": {"tenant.example/blob": "x" * 256 * 1024}}
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"},
                       "items": [{"metadata": {"name": f"p{i}", "namespace": "ml", **blob}} for i in range(20)]})
    server = streaming(body.encode())
    try:
        kube = KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{server.server_address[1]}"))
        cap = 100_000
        with pytest.raises(TooLarge, match=r"^list pods 'app=vllm': answer above 100000 bytes \(stopped reading at "
                                           r"\d+; no Content-Length\)$") as info:
            kube.list_page("pods", "app=vllm", 500, None, max_bytes=cap)
        (read,) = bytes_read.values()
        assert cap < info.value.read == read <= cap + kube_module._CHUNK < len(body) // 10
        assert info.value.status == 0
        bytes_read.clear()
        page = kube.list_page("pods", "app=vllm", 500, None, max_bytes=len(body))  # exactly the cap: whole
        assert len(page["items"]) == 20 and sum(bytes_read.values()) == len(body)
        assert kube.api_requests == 2
    finally:
        server.shutdown()
