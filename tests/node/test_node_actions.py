"""The watchdog Pod's other actions on a real node: dry-run, eviction behind a real PDB, quarantine through a
readiness gate the real kubelet honours (EndpointSlice endpoints follow it), evidence with a real log tail through
pods/log (kubelet client certificates), and a rollout of the watchdog Pod keeping its budget."""

from __future__ import annotations

import json
import time

import pytest

from watchdog.demo.controlplane.api import wait_for

pytestmark = pytest.mark.node
GATE = "vllm-watchdog.io/engine-progressing"


def test_dry_run_records_and_never_deletes(scenario):
    s = scenario("dryrun")
    ns = s.namespace("llm", mode="dry-run")
    s.deployment(ns, "engine", 2)
    pods = s.ready_pods(ns, "engine", 2)
    s.install()
    name = pods[0]["metadata"]["name"]
    s.set_mode(pods[0], "wedged")
    wait_for("StalledPodDryRun", lambda: s.events_on(ns, name, "StalledPodDryRun"), timeout=60,
             describe=lambda: s.watchdog_log()[-3000:])
    time.sleep(5)
    assert s.audit(verb="delete", resource="pods", namespace=ns) == []
    assert s.audit(verb="create", resource="pods", subresource="eviction", namespace=ns) == []
    assert not (s.world.api.find(f"/api/v1/namespaces/{ns}/pods/{name}") or {}).get("metadata", {}).get(
        "deletionTimestamp")


def test_evict_with_a_pdb(scenario):
    s = scenario("evict", config={"action": "evict"})
    ns = s.namespace("llm")
    s.deployment(ns, "engine", 3, grace_s=10)
    s.api.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "engine"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "engine"}}}})
    pods = s.ready_pods(ns, "engine", 3)
    s.install()
    name = pods[0]["metadata"]["name"]
    s.set_mode(pods[0], "wedged")
    wait_for("StalledPodDeletionDeferred (pdb)", lambda: s.events_on(ns, name, "StalledPodDeletionDeferred"),
             timeout=60, describe=lambda: s.watchdog_log()[-3000:])
    refused = s.audit(verb="create", resource="pods", subresource="eviction", namespace=ns)
    assert refused and {r["responseStatus"]["code"] for r in refused} == {429}, refused
    s.api.merge_patch(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/engine", {"spec": {"minAvailable": 2}})
    evicted = wait_for("eviction accepted", lambda: [r for r in s.audit(
        verb="create", resource="pods", subresource="eviction", namespace=ns) if r["responseStatus"]["code"] == 201],
        timeout=60, describe=lambda: s.watchdog_log()[-3000:])
    assert evicted[0]["objectRef"]["name"] == name
    assert s.audit(verb="delete", resource="pods", namespace=ns) == []  # never a plain DELETE
    wait_for(f"{name} gone", lambda: s.world.api.find(f"/api/v1/namespaces/{ns}/pods/{name}") is None, timeout=30)
    s.ready_pods(ns, "engine", 3)


def _endpoints(s, ns: str, service: str) -> dict[str, bool]:
    slices = s.api.get(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                       labelSelector=f"kubernetes.io/service-name={service}")["items"]
    return {e["targetRef"]["name"]: bool(e["conditions"].get("ready")) for sl in slices
            for e in sl.get("endpoints") or []}


def _gate(pod) -> str | None:
    return next((c["status"] for c in pod["status"].get("conditions") or [] if c["type"] == GATE), None)


def test_quarantine_gate_and_endpoints(scenario):
    s = scenario("quarantine", config={"quarantine": True, "action": "quarantine", "quarantineAfterSeconds": 2})
    ns = s.namespace("llm")
    s.deployment(ns, "engine", 2, gate=GATE)
    s.api.create(f"/api/v1/namespaces/{ns}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "engine"},
        "spec": {"selector": {"app": "engine"}, "ports": [{"name": "http", "port": 8000}]}})
    # Without the watchdog, the real kubelet keeps gated pods NotReady (containers ready, gate missing).
    def running_not_ready():
        pods = [p for p in s.pods(ns, "engine") if p["status"].get("phase") == "Running"]
        containers = [c for p in pods for c in p["status"].get("containerStatuses") or []]
        return pods if len(pods) == 2 and all(c["ready"] for c in containers) and len(containers) == 2 else None
    pods = wait_for("2 gated pods Running, containers ready", running_not_ready, timeout=90)
    time.sleep(3)
    assert all(not any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
               for p in s.pods(ns, "engine"))
    assert set(_endpoints(s, ns, "engine").values()) <= {False}
    s.install()
    pods = s.ready_pods(ns, "engine", 2, timeout=60)
    assert all(_gate(p) == "True" for p in pods)
    wait_for("2 ready endpoints", lambda: list(_endpoints(s, ns, "engine").values()) == [True, True], timeout=20)
    name = pods[0]["metadata"]["name"]
    s.set_mode(pods[0], "wedged")
    wait_for(f"{name} endpoint not ready", lambda: _endpoints(s, ns, "engine").get(name) is False, timeout=30,
             describe=lambda: s.watchdog_log()[-3000:])
    # the Event follows the gate's patch in the same cycle (after the owner walk), so the endpoint may turn first
    wait_for("StalledPodQuarantined", lambda: s.events_on(ns, name, "StalledPodQuarantined"), timeout=15)
    s.set_mode(pods[0], "progressing")
    wait_for(f"{name} endpoint ready again", lambda: _endpoints(s, ns, "engine").get(name) is True, timeout=30,
             describe=lambda: s.watchdog_log()[-3000:])
    wait_for("StalledPodReleased", lambda: s.events_on(ns, name, "StalledPodReleased"), timeout=15)
    assert s.audit(verb="delete", resource="pods", namespace=ns) == []


def test_evidence_holds_a_real_log_tail(scenario):
    s = scenario("evidence", config={"evidenceLogLines": 20, "evidenceLogBytes": 4096})
    ns = s.namespace("llm")
    s.deployment(ns, "engine", 2, grace_s=5)
    pods = s.ready_pods(ns, "engine", 2)
    s.install()
    name = pods[0]["metadata"]["name"]
    time.sleep(3)  # a few log lines
    s.set_mode(pods[0], "wedged")
    records = wait_for("an evidence record", lambda: [d["evidence"] for d in s.decisions() if "evidence" in d],
                       timeout=60, describe=lambda: s.watchdog_log()[-3000:])
    (record,) = records
    assert record["pod"] == f"{ns}/{name}" and record["outcome"] == "delete", record
    assert "engine: serving on http://0.0.0.0:8000" in record["log"] or "engine: step" in record["log"], record["log"]
    assert not record["log"].startswith("log unavailable"), record["log"]
    (read,) = [r for r in s.audit(verb="get", resource="pods", namespace=ns) if r["objectRef"].get("subresource")
               == "log"]
    assert read["responseStatus"]["code"] == 200 and "tailLines=20" in read["requestURI"], read


def test_rollout_of_the_watchdog_keeps_the_budget_and_the_engines(scenario, world):
    s = scenario("rollout", config={"maxDeletionsPerNamespace": 1, "maxDeletions": 5})
    ns = s.namespace("llm")
    s.deployment(ns, "engine", 3, grace_s=5)
    pods = s.ready_pods(ns, "engine", 3)
    first = s.install()
    assert first is not None
    s.set_mode(pods[0], "wedged")
    wait_for("first deletion", lambda: s.audit(verb="delete", resource="pods", namespace=ns), timeout=60,
             describe=lambda: s.watchdog_log()[-3000:])
    survivors = s.ready_pods(ns, "engine", 3)
    specs = {p["metadata"]["uid"]: json.dumps(p["spec"], sort_keys=True) for p in survivors}
    # the watchdog Pod goes away mid-window (a rollout); the Deployment makes a new one from the same image
    world.kubectl("delete", "pod", "-n", s.release, first["metadata"]["name"], "--wait=false")
    second = s.watchdog_pod(timeout=120, not_uid=first["metadata"]["uid"])
    victim = next(p for p in survivors if p["metadata"]["uid"] != pods[0]["metadata"]["uid"])
    s.set_mode(victim, "wedged")
    name = victim["metadata"]["name"]
    deferred = wait_for("next stall deferred by the restored budget",
                        lambda: s.events_on(ns, name, "StalledPodDeletionDeferred"), timeout=60,
                        describe=lambda: s.watchdog_log()[-3000:])
    assert "namespace budget" in deferred[0]["message"], deferred[0]["message"]
    assert len(s.audit(verb="delete", resource="pods", namespace=ns)) == 1
    assert "restored from the ledger" in s.watchdog_log(), s.watchdog_log()[-3000:]
    now = {p["metadata"]["uid"]: json.dumps(p["spec"], sort_keys=True) for p in s.pods(ns, "engine")}
    assert {uid: now.get(uid) for uid in specs} == specs  # the engines' specs are unchanged
    assert second["spec"]["containers"][0]["image"] == first["spec"]["containers"][0]["image"]
