"""Scenario 7 on a real control plane: a wedged pod in a namespace that is being deleted (Terminating).

The namespace controller normally deletes every pod of a Terminating namespace at once; to look at the window in
which a wedged pod is still Running there, a ValidatingAdmissionPolicy (in-process CEL admission, GA since 1.30)
refuses the cluster admin's pod deletions (the namespace controller, the garbage collector and the kubelet
stand-in all run as that admin) in this scenario's namespace, so the namespace stays Terminating with Running
pods until the test removes the policy.

What the real API server does there: the watchdog's DELETE passes (NamespaceLifecycle admits deletes), every
Event create is refused with 403 ("because it is being terminated"). What the watchdog does with that is pinned
below: it deletes, its Events are lost (logged and counted in ``vllm_watchdog_event_failures_total``), so a
restarted watchdog cannot read that deletion back into its budget.
"""

from __future__ import annotations

import pytest
from cluster_kit import SCENARIO_LABEL, audit
from harness import ApiError, wait_for

pytestmark = pytest.mark.cluster

NAME = "s7-terminating"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@pytest.fixture
def hold_pods(control_plane):
    """Refuse the admin's pod deletions in this scenario's namespaces while the test runs."""
    api = control_plane.api
    api.create(f"{ADMISSION}/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "cluster-tier-hold-pods"},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["DELETE"], "resources": ["pods"]}]},
                 "validations": [{"expression": "request.userInfo.username != 'cluster-admin'",
                                  "message": "cluster tier: pods of this namespace are held (scenario 7)"}]}})
    api.create(f"{ADMISSION}/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "cluster-tier-hold-pods"},
        "spec": {"policyName": "cluster-tier-hold-pods", "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {SCENARIO_LABEL: NAME}}}}})
    try:
        yield
    finally:
        api.delete(f"{ADMISSION}/validatingadmissionpolicybindings/cluster-tier-hold-pods")
        api.delete(f"{ADMISSION}/validatingadmissionpolicies/cluster-tier-hold-pods")


def test_wedged_pod_in_terminating_namespace(scenario, watchdogs, release, kubelet, control_plane, hold_pods):
    s = scenario(NAME)
    ns = s.namespace("llm", "true")
    s.deployment(ns, "engine", 2, grace_s=2)
    pods = s.ready_pods(ns, "engine", 2)
    name, uid = pods[0]["metadata"]["name"], pods[0]["metadata"]["uid"]

    def held() -> bool:  # the policy is in force once a server-side dry-run delete by the admin is refused
        try:
            s.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", params={"dryRun": "All"})
        except ApiError as exc:
            return exc.status in (403, 422)
        return False
    wait_for("the hold policy in force", held, timeout=20)

    s.api.delete(f"/api/v1/namespaces/{ns}")
    wait_for("namespace Terminating", lambda: s.api.get(f"/api/v1/namespaces/{ns}")["status"]["phase"] ==
             "Terminating")
    rel = release()
    wd = watchdogs(rel, s.name)
    kubelet.sim_for(ns, name).set_mode("wedged")
    deleted = wait_for("the watchdog's DELETE", lambda: audit(control_plane, rel.user, verb="delete",
                                                              resource="pods", namespace=ns),
                       timeout=40, describe=lambda: wd.log()[-3000:])
    assert [(d["objectRef"]["name"], d["responseStatus"]["code"]) for d in deleted] == [(name, 200)]
    assert deleted[0]["requestObject"]["preconditions"]["uid"] == uid
    refused = wait_for("its Events refused", lambda: [e for e in audit(
        control_plane, rel.user, verb="create", resource="events", namespace=ns)], timeout=10)
    assert {e["responseStatus"]["code"] for e in refused} == {403}, refused
    wait_for("the failure logged", lambda: "could not record StalledPodDeleted Event" in wd.log(), timeout=5)
    assert "vllm_watchdog_event_failures_total 2.0" in wd.metrics()
    assert wd.alive() and "Traceback" not in wd.log()
    assert s.pod(ns, name)["metadata"].get("deletionTimestamp")  # Terminating: the delete did happen

    # The deletion left no Event behind, so a restarted watchdog reads 0 deletions back for this namespace.
    assert wd.stop() == 0
    again = watchdogs(rel, s.name, name="restarted")
    wait_for("budget read back", lambda: "deletion budget restored from own Events" in again.log(), timeout=15)
    assert "deletion budget restored from own Events: 0 deletions" in again.log()
