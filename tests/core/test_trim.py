"""Trimming keeps exactly the fields discovery reads: every read of discovery over full pods and namespaces is
traced, and the trimmed objects hold those paths and no others; discovery decides the same on both."""

from __future__ import annotations

import copy
from typing import Any

from builders import BASE

from watchdog.core.discovery import discover
from watchdog.core.model import (
    EXCLUDE_ANNOTATION,
    PAUSE_ANNOTATION,
    PORT_ANNOTATION,
    WINDOW_ANNOTATION,
    OwnerRef,
    Target,
)
from watchdog.core.quarantine import read_fleet
from watchdog.core.trim import trim_namespace, trim_pod


class Traced(dict[str, Any]):
    """A dict recording the path of every key read (``spec.containers[].ports[].name``) into ``seen``."""

    def __init__(self, data: dict[str, Any], path: str, seen: set[str]) -> None:
        super().__init__(data)
        self.path, self.seen = path, seen

    def _wrap(self, key: str, value: Any) -> Any:
        path = f"{self.path}.{key}".lstrip(".")
        self.seen.add(path)
        if isinstance(value, dict):
            return Traced(value, path, self.seen)
        if isinstance(value, list):
            return [Traced(v, path + "[]", self.seen) if isinstance(v, dict) else v for v in value]
        return value

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self._wrap(key, super().get(key)) if key in self else default

    def __getitem__(self, key: str) -> Any:
        return self._wrap(key, super().__getitem__(key))


def paths(obj: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = f"{prefix}.{key}".lstrip(".")
            out |= {path} | paths(value, path)
    elif isinstance(obj, list):
        for value in obj:
            out |= paths(value, prefix + "[]")
    return out


def full_pod(name: str, **over: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "vllm", "pod-template-hash": "x"},
                     "annotations": {"vllm-watchdog.io/metrics-port": "metrics",
                                     "vllm-watchdog.io/window-seconds": "900", "kubectl/last-applied": "{...}"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-5d4f",
                                          "uid": "rs-1", "controller": True, "blockOwnerDeletion": True}],
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"nodeName": "gpu-1", "hostNetwork": False, "serviceAccountName": "default",
                 "containers": [{"name": "vllm", "image": "vllm:1", "env": [{"name": "HF_HOME", "value": "/d"}],
                                 "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"},
                                           {"name": "metrics", "containerPort": 9090}]},
                                {"name": "sidecar", "image": "envoy"}],
                 "volumes": [{"name": "cache", "emptyDir": {}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}], "hostIP": "10.1.0.1",
                   "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True",
                                                                              "lastTransitionTime": "t"}],
                   "containerStatuses": [{"name": "vllm", "restartCount": 1, "ready": True, "state": {"running": {}}},
                                         {"name": "sidecar", "restartCount": 0}]},
    }
    for dotted, value in over.items():
        *parents, leaf = dotted.split("__")
        node = pod
        for part in parents:
            node = node[part]
        node[leaf] = value
    return pod


PODS = [
    full_pod("a"),
    full_pod("b", metadata__annotations={"vllm-watchdog.io/exclude": "true"}),
    full_pod("c", metadata__deletionTimestamp="2026-01-02T00:00:00Z"),
    full_pod("d", metadata__annotations={}),  # no port annotation: the target's port name, then number
    full_pod("e", spec__readinessGates=[{"conditionType": "vllm-watchdog.io/engine-progressing"},
                                        {"conditionType": "other.io/gate"}],
             status__conditions=[{"type": "ContainersReady", "status": "True"}, {"type": "Ready", "status": "False"},
                                 {"type": "vllm-watchdog.io/engine-progressing", "status": "False", "reason": "x"},
                                 {"type": "other.io/gate", "status": "True"}]),  # quarantined by the gate
]
NAMESPACES = [
    {"metadata": {"name": "ml", "uid": "n1", "labels": {"vllm-watchdog.io/enabled": "true", "team": "a"},
                  "annotations": {"x": "y"}}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}},
    {"metadata": {"name": "old", "deletionTimestamp": "t", "labels": {"vllm-watchdog.io/enabled": "yes"}},
     "status": {"phase": "Terminating"}},
]
TARGETS = [Target(name="by-name", pod_selector="app=vllm", port="http"),
           Target(name="by-number", pod_selector="app=vllm", port="8000")]


def run(pods: list[dict[str, Any]], namespaces: list[dict[str, Any]]) -> Any:
    """Discovery once per target (each target reads the pods afresh: "first target wins" skips repeats), and the
    readiness gate's view of the pods (core/quarantine.py reads the same cached objects)."""
    return [discover(namespaces, [(t, pods)], require_controller=True, base=BASE) for t in TARGETS], read_fleet(pods)


def test_trimmed_objects_hold_exactly_the_paths_discovery_reads() -> None:
    seen_pods: set[str] = set()
    seen_namespaces: set[str] = set()
    traced_pods = [Traced(copy.deepcopy(p), "", seen_pods) for p in PODS]
    traced_namespaces = [Traced(copy.deepcopy(n), "", seen_namespaces) for n in NAMESPACES]
    run(traced_pods, traced_namespaces)
    kept_pods = set().union(*(paths(trim_pod(p)) for p in PODS))
    kept_namespaces = set().union(*(paths(trim_namespace(n)) for n in NAMESPACES))
    assert kept_pods == seen_pods
    assert kept_namespaces == seen_namespaces
    assert "metadata.labels" not in kept_pods and "spec.containers[].env" not in kept_pods


def test_discovery_decides_the_same_on_trimmed_objects() -> None:
    full, fleet = run(PODS, NAMESPACES)
    assert run([trim_pod(p) for p in PODS], [trim_namespace(n) for n in NAMESPACES]) == (full, fleet)
    owner = OwnerRef("apps/v1", "ReplicaSet", "llm-5d4f", "rs-1")
    picked = [[(t.name, t.port, t.restart_count, t.owner, t.node) for t in d.targets] for d in full]
    assert picked == [[("a", 9090, 1, owner, "gpu-1"), ("d", 8000, 1, owner, "gpu-1"),
                       ("e", 9090, 1, owner, "gpu-1")]] * 2  # e: gated, containers ready, judged before Ready
    assert [(g.uid, g.ready, g.condition) for g in fleet.gated.values()] == [("uid-e", False, "False")]
    assert dict(full[0].skipped) == {"excluded": 1, "terminating": 1}


def test_every_kept_annotation_is_cut_and_decides_the_same() -> None:
    # Hostile-tenant review: the exclude and metrics-port annotations were kept whole (up to 256 KiB per pod in the
    # cache, tenant text); now all four are cut to 64 characters, as discovery reads them.
    huge = {name: value + "x" * 256 * 1024 for name, value in (
        (EXCLUDE_ANNOTATION, "true"), (PORT_ANNOTATION, "http"), (WINDOW_ANNOTATION, "900"),
        (PAUSE_ANNOTATION, "2030-01-01T00:00:00Z"))}
    pods = [copy.deepcopy(p) for p in PODS]
    for p in pods:
        p["metadata"]["annotations"] = {**(p["metadata"].get("annotations") or {}), **huge}
    kept = [trim_pod(p)["metadata"]["annotations"] for p in pods]
    assert all(set(k) == set(huge) and max(map(len, k.values())) == 64 for k in kept)
    assert run([trim_pod(p) for p in pods], [trim_namespace(n) for n in NAMESPACES]) == run(pods, NAMESPACES)


def test_trimming_tolerates_missing_and_null_fields() -> None:
    assert trim_pod({}) == {"metadata": {}, "spec": {}, "status": {}}
    assert trim_pod({"metadata": {"annotations": None, "ownerReferences": None},
                     "spec": {"containers": [{"ports": None}]}, "status": {"conditions": None}}) == {
        "metadata": {"annotations": {}, "ownerReferences": []}, "spec": {"containers": [{"ports": []}]},
        "status": {"conditions": []}}
    assert trim_namespace({"metadata": {"name": "x", "labels": None}}) == {"metadata": {"name": "x", "labels": {}},
                                                                           "status": {}}
