"""Owners on a real control plane: the controller a wedged pod belongs to decides where the owner Event goes and
what replaces the pod.

- StatefulSet (real statefulset controller): the wedged ``engine-0`` is deleted (UID precondition); the
  controller re-creates ``engine-0`` under the same name with a new UID only once the old pod is gone (graceful
  deletion, not a force delete); the new pod is never touched; the owner Event is on the StatefulSet.
- A Job (the chart's ServiceAccount may not read Jobs: the owner walk gets a 403 and stops there): the Job is
  not verified, so no owner Event; the Pod gets its Event.
- A Node-owned (static/mirror-like) pod: the owner is cluster-scoped and never an owner the watchdog verifies (any
  pod can claim one): no Event in ``default`` nor anywhere else for it; the Pod gets its Event.
"""

from __future__ import annotations

import time

import pytest

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster

def test_statefulset_pod_replaced_under_the_same_name(scenario, watchdogs, release, kubelet, kubectl,
                                                     control_plane):
    s = scenario("s9-sts")
    ns = s.namespace("llm", "true")
    s.statefulset(ns, "engine", 1, grace_s=4)
    (pod,) = s.ready_pods(ns, "engine", 1)
    assert pod["metadata"]["name"] == "engine-0"
    old_uid = pod["metadata"]["uid"]
    rel = release()
    wd = watchdogs(rel, s.name)
    kubelet.sim_for(ns, "engine-0").set_mode("wedged")
    terminating = wait_for("engine-0 Terminating", lambda: (p := s.pod(ns, "engine-0")) and p["metadata"].get(
        "deletionTimestamp") and p, timeout=40, describe=lambda: wd.log()[-3000:])
    assert terminating["metadata"]["uid"] == old_uid
    # Graceful: no replacement while the old pod still exists (the same name cannot be re-used).
    time.sleep(1)
    assert s.pod(ns, "engine-0")["metadata"]["uid"] == old_uid
    (fresh,) = s.ready_pods(ns, "engine", 1)
    assert fresh["metadata"]["name"] == "engine-0" and fresh["metadata"]["uid"] != old_uid
    time.sleep(8)  # more than a window: the new engine-0 is left alone
    (delete,) = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert delete["requestObject"]["preconditions"]["uid"] == old_uid
    assert s.pod(ns, "engine-0")["metadata"]["uid"] == fresh["metadata"]["uid"]
    on_pod = s.events_on(ns, "Pod", "engine-0")
    assert [(e["reason"], e["involvedObject"]["uid"]) for e in on_pod] == [("StalledPodDeleted", old_uid)]
    assert [e["reason"] for e in s.events_on(ns, "StatefulSet", "engine")] == ["StalledPodDeleted"]


def test_no_owner_event_for_a_job_the_watchdog_may_not_read(scenario, watchdogs, release, kubelet, control_plane):
    s = scenario("s9-job")
    ns = s.namespace("batch", "true")
    job = s.api.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch-infer"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "vllm/vllm-openai:v0.11.0"}]}}}})
    s.owned_pod(ns, "batch-infer-x1", job, mode="wedged")
    s.ready_pods(ns, "batch-infer-x1", 1)
    rel = release()
    wd = watchdogs(rel, s.name)
    wait_for("the pod deleted", lambda: audit(control_plane, rel.user, verb="delete", resource="pods",
                                              namespace=ns), timeout=40, describe=lambda: wd.log()[-3000:])
    time.sleep(1)
    # The ServiceAccount may not read Jobs (403): the Job is not verified, so it gets no Event (issue 27 item 11).
    reads = audit(control_plane, rel.user, verb="get", resource="jobs", namespace=ns)
    assert reads and {e["responseStatus"]["code"] for e in reads} == {403}
    assert s.events_on(ns, "Job", "batch-infer") == []
    assert s.events_on(ns, "Pod", "batch-infer-x1", "StalledPodDeleted")


def test_no_owner_event_for_a_node_owned_pod(scenario, watchdogs, release, kubelet, control_plane):
    s = scenario("s9-static")
    ns = s.namespace("static", "true")
    node = s.api.get("/api/v1/nodes/node-a")
    s.owned_pod(ns, "static-engine-node-a", node, mode="wedged")
    s.ready_pods(ns, "static-engine-node-a", 1)
    rel = release()
    wd = watchdogs(rel, s.name)
    wait_for("the pod deleted", lambda: audit(control_plane, rel.user, verb="delete", resource="pods",
                                              namespace=ns), timeout=40, describe=lambda: wd.log()[-3000:])
    time.sleep(1)
    assert s.events_on(ns, "Pod", "static-engine-node-a", "StalledPodDeleted")
    refused = [e for e in audit(control_plane, rel.user, verb="create", resource="events")
               if e["responseStatus"]["code"] >= 400 and e["objectRef"].get("namespace") == ns]
    on_node = [e for e in s.events("default", "StalledPodDeleted") if e["involvedObject"].get("kind") == "Node"
               and e["involvedObject"].get("name") == "node-a"]
    assert not refused and on_node == [], (refused, wd.log()[-2000:])
