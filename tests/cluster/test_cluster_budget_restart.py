"""Scenario 6 on a real control plane: the watchdog restarts in the middle of a budget window. The new process
reads its predecessor's ``StalledPodDeleted`` Events back from the real API server (all namespaces, field
selector) and the namespace budget it restores defers the next stall instead of deleting it."""

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
    assert "deletion budget restored from own Events: 1 deletions" in second.log()
    time.sleep(2)
    deletes = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert [d["objectRef"]["name"] for d in deletes] == [alpha["metadata"]["name"]]
    assert not (s.pod(ns, beta["metadata"]["name"]) or {})["metadata"].get("deletionTimestamp")
    # The read-back is one LIST of Events across all namespaces with a field selector (no watch cache for
    # Events: the API server filters a full etcd range read).
    lists = [e for e in audit(control_plane, rel.user, verb="list", resource="events")]
    assert lists and all(e["objectRef"].get("namespace") in (None, "") for e in lists)
    assert all("fieldSelector=reason%3DStalledPodDeleted" in e["requestURI"] for e in lists), lists[0]["requestURI"]
