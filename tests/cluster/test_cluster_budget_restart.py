"""Scenario 6 on a real control plane: the watchdog restarts in the middle of a budget window. The new process
reads the deletion back from its deletion ledger (one GET of the ConfigMap <leaseName>-ledger in its namespace,
allowed by the chart's ledger Role and nothing more) — not from a LIST of every Event in the cluster — and the
namespace budget it restores defers the next stall instead of deleting it."""

from __future__ import annotations

import time

import pytest

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster


def test_restart_mid_window_keeps_the_budget(scenario, watchdogs, release, kubelet, control_plane):
    s = scenario("s6-restart")
    ns = s.namespace("llm", "true")
    s.deployment(ns, "alpha", 1, grace_s=2)
    s.deployment(ns, "beta", 1, grace_s=2)
    (alpha,) = s.ready_pods(ns, "alpha", 1)
    (beta,) = s.ready_pods(ns, "beta", 1)
    rel = release()
    first = watchdogs(rel, s.name, name="first")
    kubelet.sim_for(ns, alpha["metadata"]["name"]).set_mode("wedged")
    wait_for("alpha deleted", lambda: audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns),
             timeout=40, describe=lambda: first.log()[-3000:])
    assert first.stop() == 0

    second = watchdogs(rel, s.name, name="second")
    kubelet.sim_for(ns, beta["metadata"]["name"]).set_mode("wedged")
    deferred = wait_for("beta deferred by the restored namespace budget", lambda: s.events_on(
        ns, "Pod", beta["metadata"]["name"], "StalledPodDeletionDeferred"), timeout=40,
        describe=lambda: second.log()[-3000:])
    assert "namespace budget used: 1 deletions" in deferred[0]["message"], deferred[0]["message"]
    ledger = f"configmap {rel.namespace}/vllm-stall-watchdog-ledger"
    assert f"deletion budget restored from the ledger {ledger}: 1 removals" in second.log(), second.log()[-3000:]
    time.sleep(2)
    deletes = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert [d["objectRef"]["name"] for d in deletes] == [alpha["metadata"]["name"]]
    assert not (s.pod(ns, beta["metadata"]["name"]) or {})["metadata"].get("deletionTimestamp")
    # The ledger: written by the first process after its deletion (create or update, RBAC by resourceName), read
    # back by the second with one GET; the real API server stored exactly that deletion.
    writes = [e for e in audit(control_plane, rel.user, resource="configmaps", namespace=rel.namespace)
              if e["verb"] in ("create", "update")]
    assert writes and all(e["responseStatus"]["code"] in (200, 201) for e in writes), writes
    reads = [e for e in audit(control_plane, rel.user, verb="get", resource="configmaps", namespace=rel.namespace)
             if e["objectRef"].get("name") == "vllm-stall-watchdog-ledger"]
    assert reads and all(e["responseStatus"]["code"] in (200, 404) for e in reads)
    stored = s.api.get(f"/api/v1/namespaces/{rel.namespace}/configmaps/vllm-stall-watchdog-ledger")
    assert alpha["metadata"]["uid"] in stored["data"]["deletions"]
