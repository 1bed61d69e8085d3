"""What the node scenarios share: the chart installed with real helm as a watchdog Pod from the imported image
(one release per scenario, fast timings through ``extraEnv``, only the scenario's namespaces selected), opted-in
namespaces, Deployments of simulated engines (the engine image, ``imagePullPolicy: Never``), and the engines'
control (``POST /sim/mode`` on the pod IP, over the node's bridge)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.cluster_kit import FAST_ENV  # the same short timings; the chart's probes stay as rendered
from watchdog.demo.controlplane.api import Api, wait_for
from watchdog.demo.controlplane.locate import chart_dir
from watchdog.demo.controlplane.plane import audit
from watchdog.demo.controlplane.workloads import NAMESPACE_LABEL, is_ready
from watchdog.demo.node import workloads
from watchdog.demo.node.kit import Node

SCENARIO_LABEL = "node-test.vllm-watchdog.io/scenario"
# Mutation knob, to see a scenario fail with its rule broken (README's table): each value breaks one rule in what
# the harness hands the chart or the cluster, never in the product.
BREAKS = {
    "probe-path": "the chart's readinessProbe at /nope (test_watchdog_pod_ready_from_the_project_image)",
    "grace-1": "config gracePeriodSeconds: 1, not the pod's own 15 s (0 is refused by the config: minimum 1) "
               "(test_wedged_engine_deleted_sigterm_within_grace_replaced)",
    "dryrun-ignored": "the namespace's dry-run opt-in not passed: labelled 'true' "
                      "(test_dry_run_records_and_never_deletes)",
    "evict-as-delete": "config action: delete where the scenario asks for evict (test_evict_with_a_pdb)",
    "gate-ignored": "engines without the readiness gate (test_quarantine_gate_and_endpoints)",
    "evidence-0": "config evidenceLogLines: 0 (test_evidence_holds_a_real_log_tail)",
    "ledger-off": "config budgetLedger: false (test_rollout_of_the_watchdog_keeps_the_budget_and_the_engines)",
    "ledger-lost": "the ledger ConfigMap deleted with the watchdog Pod, so the new Pod starts without its "
                   "predecessor's record (test_rollout_of_the_watchdog_keeps_the_budget_and_the_engines)",
    "recreate": "config leaderElection: false, so the chart renders strategy Recreate "
                "(test_a_bad_upgrade_leaves_the_old_watchdog_leading_and_judging)",
}
BROKEN_CONFIG: dict[str, dict[str, Any]] = {"grace-1": {"gracePeriodSeconds": 1},
                                             "evidence-0": {"evidenceLogLines": 0},
                                             "ledger-off": {"budgetLedger": False},
                                             "recreate": {"leaderElection": False}}
BREAK = os.environ.get("NODE_TIER_BREAK", "")
if BREAK and BREAK not in BREAKS:
    raise ValueError(f"NODE_TIER_BREAK={BREAK!r}: expected one of {', '.join(BREAKS)}")


@dataclass
class World:
    node: Node
    kubectl_bin: str
    helm_bin: str
    work: Path

    @property
    def api(self) -> Api:
        assert self.node.api is not None
        return self.node.api

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        if BREAK == "ledger-lost" and args[:2] == ("delete", "pod") and "-n" in args:
            ns = args[args.index("-n") + 1]
            for cm in self.api.get(f"/api/v1/namespaces/{ns}/configmaps")["items"]:
                if cm["metadata"]["name"].endswith("-ledger"):
                    self.api.delete(f"/api/v1/namespaces/{ns}/configmaps/{cm['metadata']['name']}")
        done = subprocess.run([self.kubectl_bin, "--kubeconfig", str(self.node.admin_kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
        return done.stdout + done.stderr

    def scenario(self, name: str, **kw: Any) -> NodeScenario:
        return NodeScenario(self, name, **kw)


@dataclass
class NodeScenario:
    world: World
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    release: str = ""

    def __post_init__(self) -> None:
        self.release = f"wd-{self.name}"

    @property
    def api(self) -> Api:
        return self.world.api

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.release}:{self.release}"

    # -- the watchdog, installed by helm -----------------------------------------------------------------------
    def install(self, wait_ready: bool = True) -> dict[str, Any] | None:
        env = {**FAST_ENV, "WATCHDOG_NAMESPACE_SELECTOR": f"{SCENARIO_LABEL}={self.name}", **self.env}
        values = {**workloads.chart_values(self.release, env, self.config), **self.values}
        if BREAK == "probe-path":
            values["readinessProbe"] = {"httpGet": {"path": "/nope", "port": "http-metrics"}, "periodSeconds": 5}
        broken_config = dict(BROKEN_CONFIG.get(BREAK, {}))
        if BREAK == "evict-as-delete" and values.get("config", {}).get("action") == "evict":
            broken_config = {"action": "delete"}
        if broken_config:
            values["config"] = {**values.get("config", {}), **broken_config}
        path = self.world.work / f"values-{self.release}.yaml"
        path.write_text(yaml.safe_dump(values))
        self.helm("install", self.release, str(chart_dir()), "--create-namespace", "-f", str(path))
        self.namespaces.append(self.release)
        return self.watchdog_pod() if wait_ready else None

    def helm(self, *args: str) -> str:
        """``helm ARGS`` in the release's namespace, as an operator types it; fails the test on an error."""
        done = subprocess.run([self.world.helm_bin, *args, "--namespace", self.release, "--kubeconfig",
                               str(self.world.node.admin_kubeconfig)], capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def watchdog_pods(self) -> list[dict[str, Any]]:
        return list(self.api.get(f"/api/v1/namespaces/{self.release}/pods",
                                 labelSelector=f"app.kubernetes.io/instance={self.release}")["items"])

    def watchdog_pod(self, timeout: float = 90, not_uid: str | None = None) -> dict[str, Any]:
        """The release's one Ready watchdog Pod (other than ``not_uid``)."""
        def ready() -> dict[str, Any] | None:
            pods = [p for p in self.watchdog_pods() if is_ready(p) and p["metadata"]["uid"] != not_uid]
            return pods[0] if len(pods) == 1 else None
        return wait_for(f"watchdog pod of {self.release} Ready", ready, timeout=timeout,
                        describe=lambda: self.world.kubectl("describe", "pods", "-n", self.release, check=False)
                        [-3000:])

    def watchdog_log(self) -> str:
        return self.world.kubectl("logs", "-n", self.release, f"deploy/{self.release}", "--tail=-1", check=False)

    def decisions(self) -> list[dict[str, Any]]:
        out = []
        for line in self.watchdog_log().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    # -- engines -----------------------------------------------------------------------------------------------
    def namespace(self, suffix: str, mode: str | None = "true") -> str:
        name = f"{self.name}-{suffix}"
        if BREAK == "dryrun-ignored" and mode == "dry-run":
            mode = "true"
        labels = {SCENARIO_LABEL: self.name, **({NAMESPACE_LABEL: mode} if mode else {})}
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name, "labels": labels}})
        self.namespaces.append(name)
        wait_for(f"ServiceAccount {name}/default",
                 lambda: self.api.find(f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=20)
        return name

    def engine_spec(self, grace_s: int = 10, mode: str = "progressing", gate: str | None = None) -> dict[str, Any]:
        return workloads.engine_spec(grace_s, mode, None if BREAK == "gate-ignored" else gate)

    def deployment(self, ns: str, name: str, replicas: int, **spec_kw: Any) -> dict[str, Any]:
        return workloads.create_deployment(self.api, ns, name, replicas, self.engine_spec(**spec_kw))

    def pods(self, ns: str, app: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": f"app={app}"} if app else {}
        return list(self.api.get(f"/api/v1/namespaces/{ns}/pods", **params)["items"])

    def ready_pods(self, ns: str, app: str, count: int, timeout: float = 90) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            pods = self.pods(ns, app)
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            good = [p for p in live if is_ready(p)]
            return sorted(good, key=lambda p: p["metadata"]["name"]) if len(good) == count == len(live) else None
        return wait_for(f"{count} Ready pods of {ns}/{app}", ready, timeout=timeout,
                        describe=lambda: self.world.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False))

    def set_mode(self, pod: dict[str, Any], mode: str) -> dict[str, Any]:
        return workloads.set_mode(pod, mode)

    def events(self, ns: str, reason: str | None = None) -> list[dict[str, Any]]:
        items = self.api.get(f"/api/v1/namespaces/{ns}/events")["items"]
        return [e for e in items if reason is None or e.get("reason") == reason]

    def events_on(self, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.events(ns, reason) if e["involvedObject"].get("name") == name]

    def audit(self, verb: str | None = None, resource: str | None = None, namespace: str | None = None,
              subresource: str | None = None) -> list[dict[str, Any]]:
        return audit(self.world.node, self.user, verb=verb, resource=resource, namespace=namespace,
                     subresource=subresource)

    def cleanup(self) -> None:
        if self.release in self.namespaces:
            subprocess.run([self.world.helm_bin, "uninstall", self.release, "-n", self.release, "--kubeconfig",
                            str(self.world.node.admin_kubeconfig), "--wait", "--timeout", "60s"],
                           capture_output=True, text=True, timeout=90)
        for name in self.namespaces:
            self.api.delete(f"/api/v1/namespaces/{name}", ok=(404, 409))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(self.api.find(f"/api/v1/namespaces/{n}") for n in self.namespaces):
            time.sleep(1)
