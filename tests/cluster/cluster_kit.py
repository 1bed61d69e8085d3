"""What the cluster scenarios share beyond the package's control-plane kit (``watchdog.demo.controlplane``:
the control plane, the kubelet stand-in, chart releases installed with real helm, the watchdog process as the
chart's ServiceAccount, workloads): the chart configurations the scenarios install, the short timings
(:data:`FAST_ENV`), and :class:`Scenario`, one scenario's labelled namespaces and workloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watchdog.demo.controlplane import workloads
from watchdog.demo.controlplane.api import Api
from watchdog.demo.controlplane.kubelet import MODE_ANNOTATION
from watchdog.demo.controlplane.plane import ControlPlane
from watchdog.demo.controlplane.workloads import NAMESPACE_LABEL, VLLM_LABEL

SCENARIO_LABEL = "cluster-test.vllm-watchdog.io/scenario"  # each scenario's watchdog only sees its namespaces

# Chart values (config:) of the releases the scenarios share, one release per configuration.
EVICT_CONFIG = {"action": "evict"}
LEADER_CONFIG = {"leaderElection": True}
NODES_CONFIG = {"nodeEscalation": True, "nodeEscalationWindowSeconds": 120, "maxDeletionsPerNamespace": 2}

# Short timings so a stall is seen within seconds; the config cross-checks still hold (window >= 3 intervals,
# deadline < interval, connect timeout <= deadline). Loopback pod IPs and text logs: chart.LOOPBACK_ENV.
FAST_ENV = {
    "WATCHDOG_SCRAPE_INTERVAL_SECONDS": "1",
    "WATCHDOG_WINDOW_SECONDS": "6",
    "WATCHDOG_SCRAPE_DEADLINE_SECONDS": "0.8",
    "WATCHDOG_CONNECT_TIMEOUT_SECONDS": "0.3",
    "WATCHDOG_JITTER_SECONDS": "0",
    "WATCHDOG_MIN_POD_AGE_SECONDS": "0",
}


def scenario_env(scenario: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The watchdog environment of one scenario: :data:`FAST_ENV`, only namespaces labelled for ``scenario``."""
    return {**FAST_ENV, "WATCHDOG_NAMESPACE_SELECTOR": f"{SCENARIO_LABEL}={scenario}", **(env or {})}


@dataclass
class Scenario:
    """One scenario's namespaces (labelled so only this scenario's watchdog sees them) and helpers."""

    plane: ControlPlane
    name: str
    sim_port: int
    namespaces: list[str] = field(default_factory=list)

    @property
    def api(self) -> Api:
        assert self.plane.api is not None
        return self.plane.api

    def namespace(self, suffix: str, mode: str | None) -> str:
        """Create namespace ``<scenario>-<suffix>`` opted in with ``mode`` ("true", "dry-run" or None)."""
        name = f"{self.name}-{suffix}"
        labels = {SCENARIO_LABEL: self.name}
        if mode is not None:
            labels[NAMESPACE_LABEL] = mode
        self.namespaces.append(name)
        return workloads.create_namespace(self.api, name, labels)

    def deployment(self, namespace: str, name: str, replicas: int, *, mode: str = "progressing",
                   grace_s: int = 10, node: str | None = None) -> dict[str, Any]:
        return workloads.create_deployment(self.api, namespace, name, replicas, self.sim_port, mode=mode,
                                           grace_s=grace_s, node=node)

    def statefulset(self, namespace: str, name: str, replicas: int, *, mode: str = "progressing",
                    grace_s: int = 10) -> dict[str, Any]:
        labels = {**VLLM_LABEL, "app": name}
        created: dict[str, Any] = self.api.create(f"/apis/apps/v1/namespaces/{namespace}/statefulsets", {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {MODE_ANNOTATION: mode}},
                "spec": workloads.pod_spec(self.sim_port, grace_s)}}})
        return created

    def owned_pod(self, namespace: str, name: str, owner: dict[str, Any], *, mode: str = "progressing",
                  grace_s: int = 5) -> dict[str, Any]:
        """A pod created directly with ``owner`` as its controller owner reference (``owner`` as stored)."""
        created: dict[str, Any] = self.api.create(f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {**VLLM_LABEL, "app": name},
                         "annotations": {MODE_ANNOTATION: mode},
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                              "controller": True}]},
            "spec": workloads.pod_spec(self.sim_port, grace_s)})
        return created

    def pods(self, namespace: str, app: str | None = None) -> list[dict[str, Any]]:
        return workloads.list_pods(self.api, namespace, app)

    def ready_pods(self, namespace: str, app: str, count: int, timeout: float = 40) -> list[dict[str, Any]]:
        """Wait for exactly ``count`` Running, Ready, non-terminating pods of ``app``; return them."""
        return workloads.ready_pods(self.api, namespace, app, count, timeout)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.find(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def events(self, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
        return workloads.watchdog_events(self.api, namespace, reason)

    def events_on(self, namespace: str, kind: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events(namespace, reason)
                if (e["involvedObject"].get("kind"), e["involvedObject"].get("name")) == (kind, name)]

    def cleanup(self) -> None:
        for name in self.namespaces:
            self.api.delete(f"/api/v1/namespaces/{name}", ok=(404, 409))  # 409: already Terminating
