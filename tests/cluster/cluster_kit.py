"""What the cluster scenarios share: chart releases installed with real helm, the watchdog process running as the
chart's ServiceAccount, workload manifests, Events, kubectl, and the audit log of the watchdog's requests.

The watchdog under test is ``python -m watchdog run`` in a subprocess, with the ConfigMap the chart rendered (read
back from the API server) as its ``--config`` and a kubeconfig holding a TokenRequest token of the chart's
ServiceAccount, so the chart's RBAC is exactly what the API server enforces. Only timings (and loopback-only
settings: the listen address on 127.0.0.1, loopback pod IPs allowed) are overridden through ``WATCHDOG_*``
environment variables; see :data:`FAST_ENV`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fake_kubelet import MODE_ANNOTATION
from harness import REPO, Api, ControlPlane, free_port, tool_env, wait_for

CHART = REPO / "helm" / "vllm-stall-watchdog"
NAMESPACE_LABEL = "vllm-watchdog.io/enabled"
SCENARIO_LABEL = "cluster-test.vllm-watchdog.io/scenario"  # each scenario's watchdog only sees its namespaces
VLLM_LABEL = {"app.kubernetes.io/name": "vllm"}  # the chart's default target "vllm"
COMPONENT = "vllm-stall-watchdog"

# Chart values (config:) of the releases the scenarios share, one release per configuration.
EVICT_CONFIG = {"action": "evict"}
LEADER_CONFIG = {"leaderElection": True}
NODES_CONFIG = {"nodeEscalation": True, "nodeEscalationWindowSeconds": 120, "maxDeletionsPerNamespace": 2}

# Short timings so a stall is seen within seconds; the config cross-checks still hold (window >= 3 intervals,
# deadline < interval, connect timeout <= deadline).
FAST_ENV = {
    "WATCHDOG_SCRAPE_INTERVAL_SECONDS": "1",
    "WATCHDOG_WINDOW_SECONDS": "6",
    "WATCHDOG_SCRAPE_DEADLINE_SECONDS": "0.8",
    "WATCHDOG_CONNECT_TIMEOUT_SECONDS": "0.3",
    "WATCHDOG_JITTER_SECONDS": "0",
    "WATCHDOG_MIN_POD_AGE_SECONDS": "0",
    "WATCHDOG_LOG_FORMAT": "text",
    # Simulated engines listen on 127.10.x.y (the pods' status.podIP). The watchdog refuses loopback pod IPs
    # (an SSRF rule) unless this setting is on; it is meant for tests like this one only.
    "WATCHDOG_ALLOW_LOOPBACK_POD_IPS": "true",
}


def run_tool(args: list[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=tool_env())
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@dataclass
class Release:
    """A ``helm install`` of the chart; ``config_yaml`` is the ConfigMap's config.yaml as stored in the API."""

    name: str
    namespace: str
    values: dict[str, Any]
    fullname: str = ""
    service_account: str = ""
    config_yaml: str = ""
    token: str = ""

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def config(self) -> dict[str, Any]:
        return dict(yaml.safe_load(self.config_yaml))


def install_release(plane: ControlPlane, helm: str, kubectl: str, name: str, namespace: str,
                    values: dict[str, Any], work: Path) -> Release:
    """``helm install`` (replicaCount 0: no watchdog pod; the watchdog runs here as the chart's
    ServiceAccount), then read back the ConfigMap and the ServiceAccount, and mint a token (TokenRequest)."""
    assert plane.api is not None
    values_file = work / f"values-{name}.yaml"
    values_file.write_text(yaml.safe_dump({"replicaCount": 0, **values}))
    run_tool([helm, "install", name, str(CHART), "--namespace", namespace, "--create-namespace",
              "--kubeconfig", str(plane.admin_kubeconfig), "-f", str(values_file)], timeout=120)
    release = Release(name, namespace, values)
    selector = f"app.kubernetes.io/instance={name}"
    maps = plane.api.get(f"/api/v1/namespaces/{namespace}/configmaps", labelSelector=selector)["items"]
    assert len(maps) == 1, maps
    release.fullname = maps[0]["metadata"]["name"]
    release.config_yaml = maps[0]["data"]["config.yaml"]
    accounts = plane.api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts", labelSelector=selector)["items"]
    assert len(accounts) == 1, accounts
    release.service_account = accounts[0]["metadata"]["name"]
    release.token = run_tool([kubectl, "--kubeconfig", str(plane.admin_kubeconfig), "create", "token",
                              release.service_account, "-n", namespace, "--duration", "2h"]).stdout.strip()
    return release


class WatchdogProcess:
    """``python -m watchdog run`` as the release's ServiceAccount; :meth:`start` / :meth:`stop`."""

    def __init__(self, plane: ControlPlane, release: Release, work: Path, name: str, scenario: str,
                 env: dict[str, str] | None = None) -> None:
        self.plane, self.release, self.name = plane, release, name
        self.work = work / name
        self.work.mkdir(parents=True, exist_ok=True)
        self.config = self.work / "config.yaml"
        self.config.write_text(release.config_yaml)
        self.kubeconfig = plane.write_kubeconfig(self.work / "kubeconfig", release.token, release.service_account)
        self.port = free_port()
        self.log_path = self.work / "watchdog.log"
        self.env = {
            **os.environ, "PYTHONUNBUFFERED": "1", **FAST_ENV,
            "POD_NAMESPACE": release.namespace,  # as the chart's downward API sets it
            "WATCHDOG_LISTEN_ADDRESS": f"127.0.0.1:{self.port}",
            "WATCHDOG_NAMESPACE_SELECTOR": f"{SCENARIO_LABEL}={scenario}",
            **(env or {}),
        }
        for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
            self.env.pop(proxy, None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> WatchdogProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "watchdog", "run", "--config", str(self.config), "--kubeconfig",
                 str(self.kubeconfig)], stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
        self.started_at = time.monotonic()
        wait_for(f"watchdog {self.name} /readyz", self._ready, timeout=30, describe=lambda: self.log()[-3000:])
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"watchdog {self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())


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
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name, "labels": labels}})
        self.namespaces.append(name)
        wait_for(f"ServiceAccount {name}/default", lambda: self.api.find(
            f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=20)
        return name

    def deployment(self, namespace: str, name: str, replicas: int, *, mode: str = "progressing",
                   grace_s: int = 10, node: str | None = None) -> dict[str, Any]:
        labels = {**VLLM_LABEL, "app": name}
        pod_spec = self._pod_spec(grace_s, node)
        created: dict[str, Any] = self.api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {MODE_ANNOTATION: mode}}, "spec": pod_spec}}})
        return created

    def _pod_spec(self, grace_s: int, node: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": grace_s,
            "automountServiceAccountToken": False,
            "containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                "ports": [{"name": "http", "containerPort": self.sim_port, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
            }],
        }
        if node is not None:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        return spec

    def statefulset(self, namespace: str, name: str, replicas: int, *, mode: str = "progressing",
                    grace_s: int = 10) -> dict[str, Any]:
        labels = {**VLLM_LABEL, "app": name}
        created: dict[str, Any] = self.api.create(f"/apis/apps/v1/namespaces/{namespace}/statefulsets", {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {MODE_ANNOTATION: mode}},
                "spec": self._pod_spec(grace_s, None)}}})
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
            "spec": self._pod_spec(grace_s, None)})
        return created

    def pods(self, namespace: str, app: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": f"app={app}"} if app else {}
        return list(self.api.get(f"/api/v1/namespaces/{namespace}/pods", **params)["items"])

    def ready_pods(self, namespace: str, app: str, count: int, timeout: float = 40) -> list[dict[str, Any]]:
        """Wait for exactly ``count`` Running, Ready, non-terminating pods of ``app``; return them."""
        def ready() -> list[dict[str, Any]] | None:
            pods = [p for p in self.pods(namespace, app) if not p["metadata"].get("deletionTimestamp")]
            ok = [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
            return ok if len(ok) == count == len(pods) else None
        return list(wait_for(f"{count} ready pods of {namespace}/{app}", ready, timeout=timeout,
                             describe=lambda: _pod_table(self.pods(namespace, app))))

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.find(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def events(self, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
        params = {"fieldSelector": f"reason={reason}"} if reason else {}
        items = self.api.get(f"/api/v1/namespaces/{namespace}/events", **params)["items"]
        return [e for e in items if (e.get("source") or {}).get("component") == COMPONENT
                or e.get("reportingComponent") == COMPONENT]

    def events_on(self, namespace: str, kind: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events(namespace, reason)
                if (e["involvedObject"].get("kind"), e["involvedObject"].get("name")) == (kind, name)]

    def cleanup(self) -> None:
        for name in self.namespaces:
            self.api.delete(f"/api/v1/namespaces/{name}", ok=(404, 409))  # 409: already Terminating


def _pod_table(pods: Iterable[dict[str, Any]]) -> str:
    return "\n".join(f"{p['metadata']['name']} uid={p['metadata']['uid']} phase={p['status'].get('phase')} "
                     f"ip={p['status'].get('podIP')} node={p['spec'].get('nodeName')} "
                     f"deleting={p['metadata'].get('deletionTimestamp')}" for p in pods)


def audit(plane: ControlPlane, user: str, *, verb: str | None = None, resource: str | None = None,
          subresource: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
    """Audit events (stage ResponseComplete) of requests ``user`` made, filtered."""
    out = []
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        if event.get("stage") != "ResponseComplete" or event["user"].get("username") != user:
            continue
        if verb is not None and event.get("verb") != verb:
            continue
        if resource is not None and ref.get("resource") != resource:
            continue
        if subresource is not None and ref.get("subresource") != subresource:
            continue
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        out.append(event)
    return out


def kubectl_out(kubectl: str, plane: ControlPlane, *args: str, check: bool = True) -> str:
    done = run_tool([kubectl, "--kubeconfig", str(plane.admin_kubeconfig), *args], check=check)
    return done.stdout + done.stderr
