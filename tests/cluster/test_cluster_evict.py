"""Scenario 3 on a real control plane: ``action: evict`` (the chart swaps pods ``delete`` for pods/eviction
``create``) with a real PodDisruptionBudget computed by the real disruption controller.

- the PDB allows no disruption: the API server answers the eviction with 429, the watchdog defers
  (``StalledPodDeletionDeferred``, rule ``pdb``) and never falls back to a delete (it may not: no RBAC for it);
- the PDB is relaxed: the eviction is accepted (201), the API server writes the ``DisruptionTarget`` condition
  and starts the graceful deletion;
- two PDBs select the pod: the API server answers 500; the watchdog must not delete and should say why.
"""

from __future__ import annotations

import time

import pytest
from cluster_kit import EVICT_CONFIG

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster

EVICT = EVICT_CONFIG


def _pdb(s, ns: str, name: str, min_available: int) -> None:
    s.api.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "engine"}}}})


def _pdb_settled(s, ns: str, name: str, allowed: int):
    def check():
        pdb = s.api.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}")
        st = pdb.get("status") or {}
        return (st.get("observedGeneration") == pdb["metadata"]["generation"]
                and st.get("disruptionsAllowed") == allowed and st.get("expectedPods") == 2) and pdb
    return wait_for(f"PDB {ns}/{name} computed (disruptionsAllowed={allowed})", check, timeout=30)


def test_evict_blocked_by_pdb_then_allowed(scenario, watchdogs, release, kubelet, control_plane):
    s = scenario("s3-evict")
    ns = s.namespace("llm", "true")
    s.deployment(ns, "engine", 2, grace_s=15)
    pods = s.ready_pods(ns, "engine", 2)
    _pdb(s, ns, "engine", 2)
    _pdb_settled(s, ns, "engine", 0)
    rel = release("wd-evict", EVICT)
    wd = watchdogs(rel, s.name)
    name, uid = pods[0]["metadata"]["name"], pods[0]["metadata"]["uid"]
    kubelet.sim_for(ns, name).set_mode("wedged")

    deferred = wait_for("StalledPodDeletionDeferred (pdb) on the pod",
                        lambda: s.events_on(ns, "Pod", name, "StalledPodDeletionDeferred"), timeout=40,
                        describe=lambda: wd.log()[-3000:])
    assert "PodDisruptionBudget" in deferred[0]["message"], deferred[0]["message"]
    refused = audit(control_plane, rel.user, verb="create", resource="pods", subresource="eviction", namespace=ns)
    assert refused and {e["responseStatus"]["code"] for e in refused} == {429}, refused
    assert refused[0]["requestObject"]["deleteOptions"]["preconditions"]["uid"] == uid
    time.sleep(3)  # tried again after a backoff (1, 2, 4 intervals), never a delete, one Event per episode and rule
    assert not audit(control_plane, rel.user, verb="delete", resource="pods")
    assert not (s.pod(ns, name) or {})["metadata"].get("deletionTimestamp")
    assert len(s.events_on(ns, "Pod", name, "StalledPodDeletionDeferred")) == 1

    s.api.merge_patch(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/engine", {"spec": {"minAvailable": 1}})
    terminating = wait_for(f"{ns}/{name} evicted (Terminating)", lambda: (
        p := s.pod(ns, name)) and p["metadata"].get("deletionTimestamp") and p, timeout=30,
        describe=lambda: wd.log()[-3000:])
    conditions = {c["type"]: c for c in terminating["status"].get("conditions") or []}
    assert conditions.get("DisruptionTarget", {}).get("status") == "True", conditions
    assert conditions["DisruptionTarget"].get("reason") == "EvictionByEvictionAPI"
    accepted = [e for e in audit(control_plane, rel.user, verb="create", resource="pods", subresource="eviction",
                                 namespace=ns) if e["responseStatus"]["code"] == 201]
    assert len(accepted) == 1
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 15
    s.ready_pods(ns, "engine", 2)  # the replacement
    assert not audit(control_plane, rel.user, verb="delete", resource="pods")
    (deleted,) = s.events_on(ns, "Pod", name, "StalledPodDeleted")
    assert deleted["message"].startswith(f"Evicted pod {ns}/{name} "), deleted["message"]


def test_evict_with_two_pdbs_is_deferred_with_a_clear_reason(scenario, watchdogs, release, kubelet, control_plane):
    s = scenario("s3-two-pdbs")
    ns = s.namespace("llm", "true")
    s.deployment(ns, "engine", 2)
    pods = s.ready_pods(ns, "engine", 2)
    _pdb(s, ns, "engine-a", 1)
    _pdb(s, ns, "engine-b", 1)
    _pdb_settled(s, ns, "engine-a", 1)
    _pdb_settled(s, ns, "engine-b", 1)
    rel = release("wd-evict", EVICT)
    wd = watchdogs(rel, s.name)
    name = pods[0]["metadata"]["name"]
    kubelet.sim_for(ns, name).set_mode("wedged")
    wait_for("an eviction attempt", lambda: audit(control_plane, rel.user, verb="create", resource="pods",
                                                  subresource="eviction", namespace=ns),
             timeout=40, describe=lambda: wd.log()[-3000:])
    time.sleep(3)
    attempts = audit(control_plane, rel.user, verb="create", resource="pods", subresource="eviction", namespace=ns)
    assert {e["responseStatus"]["code"] for e in attempts} == {500}, attempts  # the API server's answer
    assert not (s.pod(ns, name) or {})["metadata"].get("deletionTimestamp")  # never deleted
    deferred = s.events_on(ns, "Pod", name, "StalledPodDeletionDeferred")
    assert deferred and "PodDisruptionBudget" in deferred[0]["message"], (deferred, wd.log()[-2000:])
