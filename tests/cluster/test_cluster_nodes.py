"""Scenario 5 on a real control plane: node escalation. Two different pods, of two namespaces (one namespace's
pods alone never taint a shared node), on one node are deleted as stalled, so the watchdog (chart with
``nodeEscalation: true``: nodes get/patch) taints the real Node, keeping the taint another actor added meanwhile,
and records ``StalledNodeTainted`` on the Node (namespace ``default``, where the API server accepts Events about
cluster-scoped objects). The resourceVersion guard of the taint patch is checked
against the real API server too: a patch based on a stale read is refused with 409."""

from __future__ import annotations

import pytest
from cluster_kit import NODES_CONFIG

from watchdog.demo.controlplane.api import Api, ApiError, wait_for
from watchdog.demo.controlplane.chart import kubectl_out
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster

NODE = "node-gpu"  # reserved: only pods pinned with a nodeSelector land there
OTHER_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "PreferNoSchedule"}


@pytest.fixture
def clean_node(control_plane):
    api = control_plane.api
    api.merge_patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": None}})
    yield NODE
    api.merge_patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": None}})


def test_node_tainted_after_repeated_stalls_keeping_other_taints(scenario, watchdogs, release, kubelet, kubectl,
                                                                 control_plane, clean_node):
    s = scenario("s5-nodes")
    ns = s.namespace("llm", "true")
    ns_b = s.namespace("llm-b", "true")
    s.deployment(ns, "alpha", 1, grace_s=2, node=NODE)
    s.deployment(ns_b, "beta", 1, grace_s=2, node=NODE)
    (alpha,) = s.ready_pods(ns, "alpha", 1)
    (beta,) = s.ready_pods(ns_b, "beta", 1)
    assert alpha["spec"]["nodeName"] == beta["spec"]["nodeName"] == NODE
    rel = release("wd-nodes", NODES_CONFIG)
    wd = watchdogs(rel, s.name)

    kubelet.sim_for(ns, alpha["metadata"]["name"]).set_mode("wedged")
    wait_for("alpha deleted", lambda: audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns),
             timeout=40, describe=lambda: wd.log()[-3000:])
    # Another actor taints the node while the watchdog runs (after its first deletion on that node).
    s.api.merge_patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": [OTHER_TAINT]}})
    assert not audit(control_plane, rel.user, verb="patch", resource="nodes")  # below the threshold so far

    kubelet.sim_for(ns_b, beta["metadata"]["name"]).set_mode("wedged")
    patches = wait_for("the node taint patch", lambda: audit(control_plane, rel.user, verb="patch",
                                                             resource="nodes"),
                       timeout=40, describe=lambda: wd.log()[-3000:])
    assert [p["responseStatus"]["code"] for p in patches] == [200], patches
    taints = s.api.get(f"/api/v1/nodes/{NODE}")["spec"]["taints"]
    keys = {(t["key"], t.get("value"), t["effect"]) for t in taints}
    assert keys == {("example.com/maintenance", "true", "PreferNoSchedule"),
                    ("vllm-watchdog.io/stalled", "true", "NoSchedule")}, taints
    tainted = wait_for("StalledNodeTainted Event in default", lambda: [
        e for e in s.events("default", "StalledNodeTainted") if e["involvedObject"].get("name") == NODE])
    assert tainted[0]["involvedObject"]["kind"] == "Node" and not tainted[0]["involvedObject"].get("namespace")
    described = kubectl_out(kubectl, control_plane, "describe", "node", NODE)
    assert "StalledNodeTainted" in described and "vllm-watchdog.io/stalled=true:NoSchedule" in described, described
    assert "could not taint" not in wd.log()


def test_stale_taint_patch_is_refused_by_the_api_server(release, control_plane, clean_node):
    """The guard the escalation relies on: a merge patch carrying the resourceVersion of an earlier read is
    refused (409) once anybody else changed the Node, so a concurrently added taint cannot be clobbered."""
    rel = release("wd-nodes", NODES_CONFIG)
    as_watchdog = Api(control_plane.base_url, rel.token, control_plane.ca_file)
    node = as_watchdog.get(f"/api/v1/nodes/{NODE}")
    control_plane.api.merge_patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": [OTHER_TAINT]}})
    with pytest.raises(ApiError) as refused:
        as_watchdog.merge_patch(f"/api/v1/nodes/{NODE}", {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": [{"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}]}})
    assert refused.value.status == 409
    assert control_plane.api.get(f"/api/v1/nodes/{NODE}")["spec"]["taints"] == [OTHER_TAINT]
