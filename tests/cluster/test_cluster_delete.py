"""Scenario 1 on a real control plane: a Deployment of 3 simulated vLLM pods, one wedges; the watchdog (as the
chart's ServiceAccount) deletes exactly that pod with a UID precondition, the real ReplicaSet controller replaces
it, the replacement is never touched, and real ``kubectl describe`` shows the ``StalledPodDeleted`` Events."""

from __future__ import annotations

import time

import pytest

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.chart import kubectl_out
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster


def test_wedged_pod_deleted_replaced_and_described(scenario, watchdogs, release, kubelet, kubectl, control_plane):
    s = scenario("s1-delete")
    ns = s.namespace("llm", "true")
    s.deployment(ns, "engine", 3, grace_s=15)
    pods = s.ready_pods(ns, "engine", 3)
    rel = release()
    wd = watchdogs(rel, s.name)
    wedged = pods[0]
    name, uid = wedged["metadata"]["name"], wedged["metadata"]["uid"]
    others = {p["metadata"]["uid"] for p in pods[1:]}
    kubelet.sim_for(ns, name).set_mode("wedged")

    # Graceful deletion: the pod stays Terminating (deletionTimestamp) until the kubelet stand-in finishes it.
    terminating = wait_for(f"{ns}/{name} Terminating", lambda: (s.pod(ns, name) or {}).get("metadata", {}).get(
        "deletionTimestamp") and s.pod(ns, name), timeout=45, describe=lambda: wd.log()[-3000:])
    assert terminating["metadata"]["uid"] == uid
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 15  # the pod's own grace period

    described = kubectl_out(kubectl, control_plane, "describe", "pod", name, "-n", ns)
    assert "StalledPodDeleted" in described, described
    assert "vllm-stall-watchdog" in described
    assert "21 requests running" in described, described  # the evidence is in the Event message

    # The DELETE the API server received: exactly one, from the chart's ServiceAccount, UID precondition.
    deletes = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert len(deletes) == 1, deletes
    options = deletes[0].get("requestObject") or {}
    assert deletes[0]["objectRef"]["name"] == name
    assert options.get("preconditions", {}).get("uid") == uid, options
    assert options.get("gracePeriodSeconds") in (None, 15), options  # never a force delete (0)
    assert deletes[0]["responseStatus"]["code"] == 200

    # The real ReplicaSet controller creates a replacement at once (terminating pods do not count).
    fresh = s.ready_pods(ns, "engine", 3)
    new = [p for p in fresh if p["metadata"]["uid"] not in others]
    assert len(new) == 1 and new[0]["metadata"]["uid"] != uid
    # The kubelet stand-in finishes the graceful deletion after the grace period (DELETE grace 0 + UID).
    wait_for(f"{ns}/{name} gone", lambda: s.pod(ns, name) is None, timeout=30)
    assert any(d["uid"] == uid for d in kubelet.deleted)

    # A further window: nothing else is touched (the replacement least of all), no Event repeated.
    time.sleep(8)
    after = s.pods(ns, "engine")
    assert {p["metadata"]["uid"] for p in after} == {p["metadata"]["uid"] for p in fresh}
    assert not any(p["metadata"].get("deletionTimestamp") for p in after)
    assert len(audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)) == 1
    on_pod = s.events_on(ns, "Pod", name)
    assert [e["reason"] for e in on_pod] == ["StalledPodDeleted"], on_pod
    assert on_pod[0]["involvedObject"]["uid"] == uid and on_pod[0]["count"] == 1
    assert not s.events_on(ns, "Pod", new[0]["metadata"]["name"])
    on_deploy = s.events_on(ns, "Deployment", "engine")
    assert [e["reason"] for e in on_deploy] == ["StalledPodDeleted"], on_deploy

    described = kubectl_out(kubectl, control_plane, "describe", "deployment", "engine", "-n", ns)
    assert "StalledPodDeleted" in described, described
    assert "Traceback" not in wd.log()
    assert wd.alive()
