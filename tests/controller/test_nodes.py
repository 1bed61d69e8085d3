"""Node escalation: the pure stall history, and tainting a Node against the Kubernetes API emulator (HTTP)."""

from __future__ import annotations

from typing import Any

import builders
import pytest
from fakes import FakeKube

from watchdog.adapters.kube import KubeClient
from watchdog.controller.nodes import NodeEscalator
from watchdog.core.escalation import NodeStallHistory
from watchdog.core.taints import parse_taint
from watchdog.demo.emulator import EmulatorServer

OURS = {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def node(srv: EmulatorServer, name: str = "gpu-1", taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return srv.create_object("/api/v1/nodes", {"metadata": {"name": name}, "spec": {"taints": taints or []}})


def taints(srv: EmulatorServer, name: str = "gpu-1") -> list[dict[str, Any]]:
    status, body = srv.request("GET", f"/api/v1/nodes/{name}")
    assert status == 200
    return list(body["spec"].get("taints") or [])


def test_history_counts_distinct_pods_within_the_window() -> None:
    h = NodeStallHistory(threshold=2, window_s=3600)
    assert h.record("n1", "pod-a", 0.0, "ns-a") is False
    assert h.record("n1", "pod-a", 10.0, "ns-a") is False  # the same pod again is still one pod
    assert h.record("n2", "pod-b", 20.0, "ns-b") is False  # another node
    assert h.record("n1", "pod-c", 3610.0, "ns-c") is True  # pod-a at 10 s is exactly 3600 s old: still inside
    assert h.record("n1", "pod-d", 7300.0, "ns-d") is False  # pod-a and pod-c are out of the window now
    assert h.count("n1") == 1 and h.count("n2") == 1  # a node is pruned when it is recorded again
    h3 = NodeStallHistory(threshold=3, window_s=60)
    assert [h3.record("n", uid, t, f"ns-{uid}") for uid, t in (("a", 0), ("b", 30), ("c", 61), ("d", 70))] == [
        False, False, False, True]  # a left the window before c; b, c, d are within 60 s
    with pytest.raises(ValueError, match="threshold >= 1 and window > 0"):
        NodeStallHistory(threshold=0, window_s=3600)
    with pytest.raises(ValueError, match="threshold >= 1 and window > 0"):
        NodeStallHistory(threshold=2, window_s=0)
    with pytest.raises(ValueError, match="1 <= min_tenants <= threshold"):
        NodeStallHistory(threshold=2, window_s=3600, min_tenants=3)
    with pytest.raises(ValueError, match="1 <= min_tenants <= threshold"):
        NodeStallHistory(threshold=2, window_s=3600, min_tenants=0)


def test_one_namespace_never_escalates_a_node_alone() -> None:
    """Issue 27 item 9: one tenant's fake-wedged pods pinned to a shared node (spec.nodeName) must not get it
    tainted: the evidence must come from at least two namespaces."""
    h = NodeStallHistory(threshold=2, window_s=3600)  # and 2 tenants (min_tenants' default)
    assert [h.record("gpu-1", f"tenant-{i}", 10.0 * i, "tenant") for i in range(5)] == [False] * 5
    assert h.count("gpu-1") == 5 and h.tenants("gpu-1") == {"tenant"}
    assert h.record("gpu-1", "other", 60.0, "team-b") is True  # a second namespace's pod: a witness
    h3 = NodeStallHistory(threshold=3, window_s=3600)
    assert h3.record("n", "a", 0.0, "x") is False
    assert h3.record("n", "b", 1.0, "y") is False  # 2 namespaces, but only 2 pods
    assert h3.record("n", "c", 2.0, "y") is True
    late = NodeStallHistory(threshold=2, window_s=100)
    assert late.record("n", "a", 0.0, "x") is False
    assert late.record("n", "b", 150.0, "y") is False  # x's pod left the window: one namespace again
    assert late.record("n", "c", 160.0, "y") is False
    single = NodeStallHistory(threshold=2, window_s=3600, min_tenants=1)  # the pure rule's knob (the watchdog
    # always wires 2)
    assert [single.record("n", uid, 0.0, "y") for uid in "ab"] == [False, True]


def test_history_forgets_nodes_beyond_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("watchdog.core.escalation.MAX_NODES", 3)
    h = NodeStallHistory(threshold=1, window_s=3600, min_tenants=1)
    for i in range(10):
        assert h.record(f"n{i}", "p", float(i), "ns") is True
    assert [h.count(f"n{i}") for i in range(10)] == [0] * 7 + [1, 1, 1]


@pytest.mark.parametrize(("text", "parsed"), [
    ("vllm-watchdog.io/stalled=true:NoSchedule", OURS),
    ("bad-gpu:NoExecute", {"key": "bad-gpu", "effect": "NoExecute"}),
    ("k=:PreferNoSchedule", {"key": "k", "value": "", "effect": "PreferNoSchedule"}),
])
def test_parse_taint(text: str, parsed: dict[str, str]) -> None:
    assert parse_taint(text) == parsed


@pytest.mark.parametrize(("text", "why"), [
    ("vllm-watchdog.io/stalled=true", "expected key\\[=value\\]:Effect"),
    ("k=v:NoScheduleX", "effect 'NoScheduleX' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
    ("k=v:noschedule", "effect 'noschedule'"),
    (":NoSchedule", "expected key"),
    ("bad key=v:NoSchedule", "key 'bad key' is not a qualified name"),
    ("-k=v:NoSchedule", "key '-k'"),
    ("k=a b:NoSchedule", "value 'a b' is not a valid label value"),
    ("k=" + "v" * 64 + ":NoSchedule", "is not a valid label value"),
])
def test_parse_taint_rejects_with_one_line(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"^invalid taint .*{why}") as info:
        parse_taint(text)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError):
        NodeEscalator(None, None, builders.node_history(), taint=text)  # type: ignore[arg-type]


def test_taints_once_the_threshold_is_crossed_keeping_other_taints(emulator: EmulatorServer,
                                                                   kube_client: KubeClient) -> None:
    created = node(emulator, taints=[GPU])
    clock = Clock()
    esc = NodeEscalator(kube_client, builders.actuator(kube_client), builders.node_history(), clock=clock)
    assert esc.on_deletion("gpu-1", "uid-a", "ml/llm-a", "ml") == "below_threshold"
    assert esc.on_deletion("gpu-1", "uid-a2", "ml/llm-a2", "ml") == "below_threshold"  # the same tenant
    assert emulator.emulator.request_log == []  # nothing read below the threshold
    clock.t += 1800
    assert esc.on_deletion("gpu-1", "uid-b", "team-b/llm-b", "team-b") == "tainted"
    assert taints(emulator) == [GPU, OURS]
    log = [(r.method, r.verb, r.resource) for r in emulator.emulator.request_log]
    assert log == [("GET", "get", "nodes"), ("PATCH", "patch", "nodes"), ("POST", "create", "events")]
    events = emulator.list_events("default")
    assert len(events) == 1
    event = events[0]
    assert (event["reason"], event["type"], event["reportingComponent"]) == (
        "StalledNodeTainted", "Warning", "vllm-stall-watchdog")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1",
                                       "uid": created["metadata"]["uid"]}
    assert "3 different pods of 2 tenants" in event["message"] and "team-b/llm-b" in event["message"]
    emulator.emulator.request_log.clear()
    clock.t += 60
    assert esc.on_deletion("gpu-1", "uid-c", "ml/llm-c", "ml") == "already_tainted"
    assert [r.verb for r in emulator.emulator.request_log] == ["get"]  # no second patch, no second Event
    assert taints(emulator) == [GPU, OURS] and len(emulator.list_events("default")) == 1


def test_the_patch_carries_the_resource_version_read(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    node(emulator)
    esc = NodeEscalator(kube_client, builders.actuator(kube_client),
                        builders.node_history(threshold=1, min_tenants=1), clock=Clock())
    bumped = emulator.patch_object("/api/v1/nodes/gpu-1", {"metadata": {"labels": {"zone": "a"}}})
    assert esc.on_deletion("gpu-1", "uid-a", "ml/a", "ml") == "tainted"
    stored = emulator.request("GET", "/api/v1/nodes/gpu-1")[1]
    assert int(stored["metadata"]["resourceVersion"]) == int(bumped["metadata"]["resourceVersion"]) + 1
    assert stored["metadata"]["labels"] == {"zone": "a"}  # the merge patch touched only spec.taints


class RacingKube(FakeKube):
    """get_node answers, then somebody else changes the Node before our patch arrives."""

    def __init__(self, kube: KubeClient, srv: EmulatorServer) -> None:
        super().__init__(kube)
        self.srv = srv

    def get_node(self, name: str) -> dict[str, Any] | None:
        got = self.inner.get_node(name)
        self.srv.patch_object(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
        return got


def test_a_conflict_is_an_error_and_not_retried(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    node(emulator, taints=[GPU])
    racing = RacingKube(kube_client, emulator)
    esc = NodeEscalator(racing, builders.actuator(racing),  # type: ignore[arg-type]
                        builders.node_history(threshold=1, min_tenants=1), clock=Clock())
    assert esc.on_deletion("gpu-1", "uid-a", "ml/a", "ml") == "error"
    assert [r.verb for r in emulator.emulator.request_log] == ["get", "patch"]  # one patch (409), no retry
    assert taints(emulator) == [GPU] and emulator.list_events("default") == []


def test_dry_run_never_touches_the_node(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    node(emulator)
    esc = NodeEscalator(kube_client, builders.actuator(kube_client),
                        builders.node_history(threshold=1, min_tenants=1), dry_run=True, clock=Clock())
    assert esc.on_deletion("gpu-1", "uid-a", "ml/a", "ml") == "dry_run"
    assert esc.on_deletion("gpu-1", "uid-b", "ml/b", "ml") == "dry_run"
    assert emulator.emulator.request_log == [] and taints(emulator) == []


def test_no_node_missing_node_and_api_errors_never_raise(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    esc = NodeEscalator(kube_client, builders.actuator(kube_client),
                        builders.node_history(threshold=1, min_tenants=1), clock=Clock())
    assert esc.on_deletion(None, "uid-a", "ml/a", "ml") == "no_node"
    assert esc.on_deletion("", "uid-a", "ml/a", "ml") == "no_node"
    assert esc.on_deletion("gone", "uid-a", "ml/a", "ml") == "error"  # 404 on the node
    node(emulator)
    emulator.stop()
    assert esc.on_deletion("gpu-1", "uid-b", "ml/b", "ml") == "error"  # API unreachable


def test_never_untaints(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    node(emulator, taints=[{**OURS, "value": "by-hand"}])  # same key and effect, set by a human
    clock = Clock()
    esc = NodeEscalator(kube_client, builders.actuator(kube_client), NodeStallHistory(threshold=2, window_s=100),
                        clock=clock)
    esc.on_deletion("gpu-1", "uid-a", "ml/a", "ml")
    assert esc.on_deletion("gpu-1", "uid-b", "team-b/b", "team-b") == "already_tainted"  # not rewritten to value=true
    for i in range(5):  # stalls stop; time passes far beyond the window
        clock.t += 1000
        assert esc.on_deletion("gpu-1", f"uid-late-{i}", "ml/x", "ml") == "below_threshold"
    assert taints(emulator) == [{**OURS, "value": "by-hand"}]
    assert emulator.emulator.count_requests(verb="patch") == 0
    assert emulator.emulator.count_requests(verb="replace") == 0
