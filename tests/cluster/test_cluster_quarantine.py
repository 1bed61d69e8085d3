"""Quarantine through a readiness gate on the real control plane (issue 17).

The kubelet stand-in (watchdog/demo/controlplane/kubelet.py) plays the kubelet's status manager for readiness
gates: a gated pod is Ready only while every gate condition is True. It also gives gated pods a second, ULA pod IP
so that an IPv6 headless Service's EndpointSlices (written by kube-controller-manager's real endpointslice
controller) can hold them: the endpoint's ``ready`` follows the pod's Ready, which follows the watchdog's gate.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pytest

from watchdog.demo.controlplane import workloads
from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.kubelet import MODE_ANNOTATION
from watchdog.demo.controlplane.plane import audit
from watchdog.demo.controlplane.workloads import VLLM_LABEL

pytestmark = pytest.mark.cluster

GATE = "vllm-watchdog.io/engine-progressing"
QUARANTINE_CONFIG = {"quarantine": True, "action": "quarantine", "quarantineAfterSeconds": 2}


def gated_deployment(s: Any, ns: str, name: str, replicas: int) -> None:
    labels = {**VLLM_LABEL, "app": name}
    spec = workloads.pod_spec(s.sim_port, 5)
    spec["readinessGates"] = [{"conditionType": GATE}]
    s.api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels, "annotations": {MODE_ANNOTATION: "progressing"}}, "spec": spec}}})
    s.api.create(f"/api/v1/namespaces/{ns}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"clusterIP": "None", "ipFamilies": ["IPv6"], "ipFamilyPolicy": "SingleStack",
                 "selector": labels, "ports": [{"name": "http", "port": s.sim_port}]}})


def endpoint_ready(s: Any, ns: str, service: str) -> dict[str, bool]:
    """Pod name -> the endpoint's ``ready`` condition in the Service's EndpointSlices."""
    slices = s.api.get(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                       labelSelector=f"kubernetes.io/service-name={service}")["items"]
    return {e["targetRef"]["name"]: bool(e["conditions"].get("ready")) for sl in slices
            for e in sl.get("endpoints") or []}


def since(pod: dict[str, Any], kind: str) -> float:
    stamp = next(c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == kind)
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").timestamp()


def gate_of(pod: dict[str, Any]) -> str | None:
    return next((c["status"] for c in pod["status"].get("conditions") or [] if c["type"] == GATE), None)


def test_quarantine_drains_endpoints_releases_and_never_deletes(scenario, watchdogs, release, kubelet,
                                                                  control_plane):
    s = scenario("quarantine")
    ns = s.namespace("llm", "true")
    rel = release("wd-quarantine", QUARANTINE_CONFIG)
    wd = watchdogs(rel, s.name)
    started = time.monotonic()
    gated_deployment(s, ns, "engine", 3)

    # A rollout of gated pods becomes Ready without waiting a window (6 s here): admitted at the first cycle.
    pods = s.ready_pods(ns, "engine", 3, timeout=30)
    took = time.monotonic() - started
    assert all(gate_of(p) == "True" for p in pods)
    added = [since(p, "Ready") - since(p, "ContainersReady") for p in pods]  # what the gate adds, 1 s resolution
    print(f"gated rollout of 3 pods Ready after {took:.1f} s; the gate added {added} s (interval 1 s, window 6 s)")
    assert max(added) <= 3, added
    wait_for("3 ready endpoints", lambda: list(endpoint_ready(s, ns, "engine").values()) == [True] * 3,
             timeout=15)

    # One engine wedges: out of the endpoints within quarantineAfterSeconds (2) + about an interval, not a window.
    name = pods[0]["metadata"]["name"]
    kubelet.sim_for(ns, name).set_mode("wedged")
    t0 = time.monotonic()
    wait_for(f"{name} endpoint not ready", lambda: endpoint_ready(s, ns, "engine").get(name) is False,
             timeout=20, describe=lambda: wd.log()[-3000:])
    drained_after = time.monotonic() - t0
    print(f"wedged -> endpoint not ready after {drained_after:.1f} s")
    assert gate_of(s.pod(ns, name) or {"status": {}}) == "False"
    assert [e["reason"] for e in s.events_on(ns, "Pod", name)] == ["StalledPodQuarantined"]

    # The owner share (0.5 of 3 -> 1): a second wedged pod is held back, stays Ready and in the endpoints.
    other = pods[1]["metadata"]["name"]
    kubelet.sim_for(ns, other).set_mode("wedged")
    time.sleep(10)  # past the window: action quarantine never deletes either
    assert endpoint_ready(s, ns, "engine")[other] is True
    assert gate_of(s.pod(ns, other) or {"status": {}}) == "True"
    held = r'^vllm_watchdog_quarantine_held_total\{namespace="[^"]+",rule="owner_share",target="[^"]+"\} 1\.0$'
    assert re.search(held, wd.metrics(), re.M)
    assert audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns) == []
    assert all(not p["metadata"].get("deletionTimestamp") for p in s.pods(ns, "engine"))

    # Recovery: progress releases the gate and the endpoint is ready again.
    kubelet.sim_for(ns, other).set_mode("progressing")
    kubelet.sim_for(ns, name).set_mode("progressing")
    wait_for(f"{name} endpoint ready again", lambda: endpoint_ready(s, ns, "engine").get(name) is True,
             timeout=20, describe=lambda: wd.log()[-3000:])
    assert sorted(e["reason"] for e in s.events_on(ns, "Pod", name)) == ["StalledPodQuarantined", "StalledPodReleased"]
    patches = audit(control_plane, rel.user, verb="patch", resource="pods", namespace=ns)
    assert patches and all((p["objectRef"].get("subresource") == "status") for p in patches)
    assert "Traceback" not in wd.log() and wd.alive()
