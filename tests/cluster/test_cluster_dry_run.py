"""Scenario 2 on a real control plane: a namespace labelled ``vllm-watchdog.io/enabled=dry-run`` gets
``StalledPodDryRun`` Events and nothing is deleted; relabelled to ``true`` (real ``kubectl label``) the same
stalled pod is deleted."""

from __future__ import annotations

import time

import pytest

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.chart import kubectl_out
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster


def test_dry_run_records_events_and_deletes_nothing(scenario, watchdogs, release, kubectl, control_plane):
    s = scenario("s2-dry-run")
    ns = s.namespace("canary", "dry-run")
    s.deployment(ns, "engine", 1, mode="wedged")
    (pod,) = s.ready_pods(ns, "engine", 1)
    name = pod["metadata"]["name"]
    rel = release()
    wd = watchdogs(rel, s.name)
    wait_for("StalledPodDryRun Event on the pod", lambda: s.events_on(ns, "Pod", name, "StalledPodDryRun"),
             timeout=40, describe=lambda: wd.log()[-3000:])
    time.sleep(4)  # several more cycles of the same stall
    assert not (s.pod(ns, name) or {}).get("metadata", {}).get("deletionTimestamp")
    assert not audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    on_pod = s.events_on(ns, "Pod", name)
    assert [e["reason"] for e in on_pod] == ["StalledPodDryRun"], on_pod  # one announcement per stall
    assert on_pod[0]["message"].startswith(f"Would delete pod {ns}/{name} "), on_pod[0]["message"]
    assert [e["reason"] for e in s.events_on(ns, "Deployment", "engine")] == ["StalledPodDryRun"]
    assert "StalledPodDryRun" in kubectl_out(kubectl, control_plane, "describe", "pod", name, "-n", ns)


def test_dry_run_then_enforce_deletes(scenario, watchdogs, release, kubectl, control_plane):
    s = scenario("s2-enforce")
    ns = s.namespace("canary", "dry-run")
    s.deployment(ns, "engine", 1, mode="wedged")
    (pod,) = s.ready_pods(ns, "engine", 1)
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    rel = release()
    wd = watchdogs(rel, s.name)
    wait_for("StalledPodDryRun Event on the pod", lambda: s.events_on(ns, "Pod", name, "StalledPodDryRun"),
             timeout=40, describe=lambda: wd.log()[-3000:])
    assert not audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)

    kubectl_out(kubectl, control_plane, "label", "namespace", ns, "vllm-watchdog.io/enabled=true", "--overwrite")
    wait_for(f"{ns}/{name} deleted after the switch to enforce",
             lambda: audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns),
             timeout=25, describe=lambda: wd.log()[-3000:])
    (delete,) = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert delete["requestObject"]["preconditions"]["uid"] == uid
    # The Event is created right after the DELETE: wait for it rather than race it.
    wait_for("StalledPodDeleted Event on the pod", lambda: s.events_on(ns, "Pod", name, "StalledPodDeleted"),
             timeout=15)
