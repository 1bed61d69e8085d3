"""What runs on the real node besides the watchdog: Deployments of simulated engines (the engine image,
``imagePullPolicy: Never``; their readiness as the kubelet reports it is ``controlplane.workloads.is_ready``),
their control (``POST /sim/mode`` on the pod IP, over the node's bridge), and the chart's values for a watchdog
Pod from the imported image."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from watchdog.demo.controlplane.api import Api
from watchdog.demo.controlplane.workloads import VLLM_LABEL
from watchdog.demo.node.images import ENGINE_IMAGE, VERSION

ENGINE_PORT = 8000
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def engine_spec(grace_s: int = 10, mode: str = "progressing", gate: str | None = None,
                drain_s: float | None = None) -> dict[str, Any]:
    """A pod spec of one simulated engine (``/health`` as its readiness probe; ``gate``: a readiness gate)."""
    args = ["--port", str(ENGINE_PORT), "--mode", mode]
    if drain_s is not None:
        args += ["--drain-seconds", f"{drain_s:g}"]
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_s,
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "vllm", "image": ENGINE_IMAGE, "imagePullPolicy": "Never", "args": args,
            "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        }],
    }
    if gate:
        spec["readinessGates"] = [{"conditionType": gate}]
    return spec


def create_deployment(api: Api, ns: str, name: str, replicas: int, spec: dict[str, Any]) -> dict[str, Any]:
    labels = {**VLLM_LABEL, "app": name}
    created: dict[str, Any] = api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec}}})
    return created


def set_mode(pod: dict[str, Any], mode: str) -> dict[str, Any]:
    """Switch a simulated engine's mode through its ``/sim/mode`` on the pod IP."""
    url = f"http://{pod['status']['podIP']}:{ENGINE_PORT}/sim/mode?mode={mode}"
    with _NO_PROXY.open(urllib.request.Request(url, data=b"", method="POST"), timeout=5) as resp:
        return dict(json.loads(resp.read()))


def chart_values(release: str, env: dict[str, str], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's values for a watchdog Pod from the imported image (never pulled), ``env`` as ``extraEnv``."""
    return {"fullnameOverride": release,
            "image": {"repository": "vllm-stall-watchdog", "tag": VERSION, "pullPolicy": "Never"},
            "extraEnv": [{"name": k, "value": v} for k, v in env.items()],
            **({"config": config} if config else {})}
