"""Scenario 4 on a real control plane: two watchdog processes campaign for one real coordination.k8s.io/v1
Lease (the chart's namespaced Role allows exactly that Lease). Exactly one acts; when it stops, the standby takes
the Lease over and reads the deletion budget back (the namespace budget it restored defers the next stall)."""

from __future__ import annotations

import re
import time

import pytest
from cluster_kit import LEADER_CONFIG

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster


def _identity(log: str) -> str:
    found = re.search(r"leader election on: Lease \S+ as (\S+)", log)
    assert found, log[-2000:]
    return found.group(1)


def test_one_leader_acts_and_the_standby_takes_over_with_the_budget(scenario, watchdogs, release, kubelet,
                                                                    control_plane):
    s = scenario("s4-leader")
    ns = s.namespace("llm", "true")
    s.deployment(ns, "engine", 3, grace_s=3)
    pods = s.ready_pods(ns, "engine", 3)
    rel = release("wd-leader", LEADER_CONFIG)
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{rel.namespace}/leases/vllm-stall-watchdog"
    a = watchdogs(rel, s.name, name="a")
    b = watchdogs(rel, s.name, name="b")
    ids = {_identity(a.log()): a, _identity(b.log()): b}
    holder = wait_for("a Lease holder", lambda: (s.api.find(lease_path) or {}).get("spec", {}).get(
        "holderIdentity"), timeout=20)
    assert holder in ids
    leader, standby = ids[holder], next(p for i, p in ids.items() if i != holder)

    first = pods[0]["metadata"]
    kubelet.sim_for(ns, first["name"]).set_mode("wedged")
    wait_for("the wedged pod deleted", lambda: audit(control_plane, rel.user, verb="delete", resource="pods",
                                                     namespace=ns), timeout=45,
             describe=lambda: leader.log()[-2000:] + "\n---\n" + standby.log()[-2000:])
    time.sleep(3)
    (delete,) = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert delete["requestObject"]["preconditions"]["uid"] == first["uid"]
    assert "remediation deleted" in leader.log()
    assert "remediation deleted" not in standby.log()
    assert len(s.events_on(ns, "Pod", first["name"], "StalledPodDeleted")) == 1  # the standby wrote nothing
    assert (s.api.get(lease_path)["spec"]["holderIdentity"]) == holder

    # The leader stops (SIGTERM releases the Lease); the standby takes over and reads the budget back.
    assert leader.stop() == 0
    wait_for("the standby holds the Lease", lambda: s.api.get(lease_path)["spec"].get("holderIdentity") ==
             _identity(standby.log()), timeout=25, describe=lambda: standby.log()[-2000:])
    s.ready_pods(ns, "engine", 3)  # the replacement is Ready: the owner rule would not hold the next one back
    second = pods[1]["metadata"]
    kubelet.sim_for(ns, second["name"]).set_mode("wedged")
    deferred = wait_for("the next stall deferred by the restored namespace budget", lambda: s.events_on(
        ns, "Pod", second["name"], "StalledPodDeletionDeferred"), timeout=40, describe=lambda: standby.log()[-3000:])
    assert "namespace budget used: 1 deletions" in deferred[0]["message"], deferred[0]["message"]
    assert len(audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)) == 1
    lease = s.api.get(lease_path)["spec"]
    assert lease["leaseTransitions"] >= 1
