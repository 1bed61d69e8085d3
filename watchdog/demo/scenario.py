"""Seeding helpers shared by ``demo`` and the end-to-end tests: workloads in the emulator whose pods point at
simulated vLLM pods, a kubeconfig for the emulator, and a watchdog config file.

Everything here talks to the Kubernetes API *emulator* (watchdog/demo/emulator.py), never to a real cluster,
and only to loopback addresses.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from watchdog.demo.emulator import EmulatorClient

VLLM_LABELS = {"app.kubernetes.io/name": "vllm"}


def _owner(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def pod_manifest(namespace: str, name: str, ip: str, port: int, *, labels: Mapping[str, str] | None = None,
                 annotations: Mapping[str, str] | None = None, owner: Mapping[str, Any] | None = None,
                 ready: bool = True, host_network: bool = False, restart_count: int = 0,
                 more_ports: Sequence[int] = ()) -> dict[str, Any]:
    """A Running vLLM-like pod whose ``status.podIP`` is ``ip`` and whose container port ``http`` is ``port``
    (``more_ports``: further ports it declares, e.g. a second engine's)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or VLLM_LABELS),
                            "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [_owner(owner)]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"hostNetwork": host_network, "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"},
                      *({"name": f"http-{p}", "containerPort": p, "protocol": "TCP"} for p in more_ports)],
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
        }]},
        "status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "vllm", "ready": ready, "restartCount": restart_count}],
        },
    }


def seed_deployment(client: EmulatorClient, namespace: str, name: str, ip: str, port: int,
                    **pod_kw: Any) -> dict[str, dict[str, Any]]:
    """Create Deployment ``name`` -> ReplicaSet -> one Pod (owner references as a real controller sets them).
    Returns ``{"deployment": ..., "replicaset": ..., "pod": ...}`` as stored by the emulator."""
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    labels = dict(pod_kw.pop("labels", None) or VLLM_LABELS)
    deploy = client.create_object(f"{apps}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}}})
    suffix = secrets.token_hex(4)
    rs = client.create_object(f"{apps}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-{suffix}", "namespace": namespace, "ownerReferences": [_owner(deploy)]},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}}})
    pod = client.create_pod(pod_manifest(namespace, f"{name}-{suffix}-{secrets.token_hex(3)[:5]}", ip, port,
                                         labels=labels, owner=rs, **pod_kw))
    return {"deployment": deploy, "replicaset": rs, "pod": pod}


def seed_statefulset(client: EmulatorClient, namespace: str, name: str, ip: str, port: int,
                     **pod_kw: Any) -> dict[str, dict[str, Any]]:
    """Create StatefulSet ``name`` and its pod ``name-0``."""
    labels = dict(pod_kw.pop("labels", None) or VLLM_LABELS)
    sts = client.create_object(f"/apis/apps/v1/namespaces/{namespace}/statefulsets", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}}})
    pod = client.create_pod(pod_manifest(namespace, f"{name}-0", ip, port, labels=labels, owner=sts, **pod_kw))
    return {"statefulset": sts, "pod": pod}


def write_kubeconfig(path: Path, base_url: str) -> Path:
    """A kubeconfig for the emulator at ``base_url`` (plain HTTP, no credentials)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": base_url}}],
        "users": [{"name": "emulator", "user": {}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator"}}],
    }))
    return path


def write_config(path: Path, **settings: Any) -> Path:
    """A watchdog config file (camelCase keys, as the Helm chart renders it)."""
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return path


FAST_SETTINGS: dict[str, Any] = {
    # Short window and interval so a demo or a test sees a stall within seconds; validation still holds
    # (window >= 3 intervals, deadline < interval).
    "windowSeconds": 5.0,
    "scrapeIntervalSeconds": 1.0,
    "scrapeDeadlineSeconds": 0.8,
    "connectTimeoutSeconds": 0.3,
    "jitterSeconds": 0.0,
    "minSamples": 3,
    "listenAddress": "127.0.0.1:0",
    "logFormat": "text",
    "allowLoopbackPodIps": True,  # the simulated pods listen on 127.0.0.x (demo and tests only)
}
