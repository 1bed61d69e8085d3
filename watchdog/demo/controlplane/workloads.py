"""Workloads on the real control plane: opted-in namespaces, Deployments of simulated vLLM pods (the real
ReplicaSet controller creates the pods, the kubelet stand-in runs them), and the watchdog's Events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from watchdog.demo.controlplane.api import Api, wait_for
from watchdog.demo.controlplane.kubelet import MODE_ANNOTATION

NAMESPACE_LABEL = "vllm-watchdog.io/enabled"
VLLM_LABEL = {"app.kubernetes.io/name": "vllm"}  # the chart's default target "vllm"
COMPONENT = "vllm-stall-watchdog"  # the watchdog's Event source / reportingComponent
IMAGE = "vllm/vllm-openai:v0.11.0"  # never pulled: the kubelet stand-in serves a simulated engine instead


def create_namespace(api: Api, name: str, labels: dict[str, str]) -> str:
    """Create namespace ``name``; return once its ServiceAccount ``default`` exists (pods are refused before)."""
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name, "labels": labels}})
    wait_for(f"ServiceAccount {name}/default", lambda: api.find(
        f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=20)
    return name


def pod_spec(port: int, grace_s: int, node: str | None = None) -> dict[str, Any]:
    """A vLLM-like pod spec: container port ``http`` = ``port`` (where the stand-in serves the engine)."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_s,
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "vllm", "image": IMAGE,
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
        }],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return spec


def create_deployment(api: Api, namespace: str, name: str, replicas: int, port: int, *,
                      mode: str = "progressing", grace_s: int = 10, node: str | None = None) -> dict[str, Any]:
    """Deployment ``name`` (labels ``app.kubernetes.io/name=vllm``, ``app=name``) whose pods' engines start in
    ``mode``; returned as stored."""
    labels = {**VLLM_LABEL, "app": name}
    created: dict[str, Any] = api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels, "annotations": {MODE_ANNOTATION: mode}},
            "spec": pod_spec(port, grace_s, node)}}})
    return created


def list_pods(api: Api, namespace: str, app: str | None = None) -> list[dict[str, Any]]:
    params = {"labelSelector": f"app={app}"} if app else {}
    return list(api.get(f"/api/v1/namespaces/{namespace}/pods", **params)["items"])


def is_ready(pod: dict[str, Any]) -> bool:
    """Running, Ready, with a pod IP, not terminating."""
    status = pod.get("status") or {}
    return (not pod["metadata"].get("deletionTimestamp") and status.get("phase") == "Running"
            and bool(status.get("podIP")) and any(c["type"] == "Ready" and c["status"] == "True"
                                                  for c in status.get("conditions") or []))


def ready_pods(api: Api, namespace: str, app: str, count: int, timeout: float = 40) -> list[dict[str, Any]]:
    """Wait for exactly ``count`` Running, Ready, non-terminating pods of ``app`` (and no others); return them."""
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in list_pods(api, namespace, app) if not p["metadata"].get("deletionTimestamp")]
        ok = [p for p in pods if is_ready(p)]
        return ok if len(ok) == count == len(pods) else None
    return list(wait_for(f"{count} ready pods of {namespace}/{app}", ready, timeout=timeout,
                         describe=lambda: pod_table(list_pods(api, namespace, app))))


def pod_table(pods: Iterable[dict[str, Any]]) -> str:
    return "\n".join(f"{p['metadata']['name']} uid={p['metadata']['uid']} phase={p['status'].get('phase')} "
                     f"ip={p['status'].get('podIP')} node={p['spec'].get('nodeName')} "
                     f"deleting={p['metadata'].get('deletionTimestamp')}" for p in pods)


def list_events(api: Api, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
    """Every core/v1 Event in ``namespace`` (optionally of one ``reason``), oldest first."""
    params = {"fieldSelector": f"reason={reason}"} if reason else {}
    return list(api.get(f"/api/v1/namespaces/{namespace}/events", **params)["items"])


def is_watchdog_event(event: dict[str, Any]) -> bool:
    return (event.get("source") or {}).get("component") == COMPONENT or event.get("reportingComponent") == COMPONENT


def watchdog_events(api: Api, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
    """The watchdog's own Events in ``namespace``."""
    return [e for e in list_events(api, namespace, reason) if is_watchdog_event(e)]
