"""Scenario 7 on a real control plane: a wedged pod in a namespace that is being deleted (Terminating).

The namespace controller normally deletes every pod of a Terminating namespace at once; to look at the window in
which a wedged pod is still Running there, a ValidatingAdmissionPolicy (in-process CEL admission, GA since 1.30)
refuses the cluster admin's pod deletions (the namespace controller, the garbage collector and the kubelet
stand-in all run as that admin) in this scenario's namespace, so the namespace stays Terminating with Running
pods until the test removes the policy.

What the real API server does there: a DELETE would pass (NamespaceLifecycle admits deletes), but every Event
create is refused with 403 ("because it is being terminated"), so a deletion there would spend budget and leave
no Event for a restarted watchdog to read back. The decision (issue 12): pods of a Terminating namespace are
never acted on (skip reason ``namespace_terminating``; the namespace controller removes them anyway), and
nothing is charged.
"""

from __future__ import annotations

import time

import pytest
from cluster_kit import SCENARIO_LABEL

from watchdog.demo.controlplane.api import ApiError, wait_for
from watchdog.demo.controlplane.plane import audit

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
    wait_for("the pods skipped as namespace_terminating",
             lambda: 'vllm_watchdog_pods_watched 0.0' in wd.metrics() and "namespace_terminating" in wd.log(),
             timeout=30, describe=lambda: wd.log()[-3000:])
    time.sleep(8)  # longer than the window: a wedge there would have been acted on by now
    assert audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns) == []
    assert audit(control_plane, rel.user, verb="create", resource="events", namespace=ns) == []
    assert not s.pod(ns, name)["metadata"].get("deletionTimestamp")
    assert s.pod(ns, name)["metadata"]["uid"] == uid
    assert wd.alive() and "Traceback" not in wd.log()
