"""What the real API server (v1.35) does that the emulator did not show, pinned as facts the watchdog's design
relies on (each checked directly against the API, most as the chart's ServiceAccount):

- a loopback ``status.podIP`` is accepted in pods/status, but Endpoints and EndpointSlices refuse loopback
  addresses (so this tier creates no Services for its pods);
- a core/v1 Event about a cluster-scoped object (a Node) is refused (422) outside ``default``;
- label selectors are parsed: a malformed one is a 400 on every LIST (but ``app in ()`` is accepted);
- ``preconditions.uid`` of a DELETE is enforced (409 for another UID);
- an eviction of a pod without a PodDisruptionBudget is accepted (201) and the API server writes the
  ``DisruptionTarget`` condition before the graceful deletion starts;
- in a namespace being deleted (Terminating), creates (Events, evictions) are refused with 403 by the
  NamespaceLifecycle admission while deletes pass;
- an eviction with a stale UID precondition spends the PDB's budget before it is refused with 409;
- a named Event (the watchdog's once-per-pod Events, ``event_body(once=True)``) is accepted, and a second create
  of it is refused with 409 AlreadyExists while the first stays (what keeps a restart from repeating it).
"""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_kit import EVICT_CONFIG

from watchdog.core.events import REASON_TARGETS_OVERLAP, event_body
from watchdog.demo.controlplane.api import Api, ApiError, wait_for

pytestmark = pytest.mark.cluster


def _as(control_plane, release) -> Api:
    return Api(control_plane.base_url, release.token, control_plane.ca_file)


def _event(namespace: str, involved: dict, reason: str = "ClusterTierProbe") -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "probe.", "namespace": namespace},
            "involvedObject": involved, "reason": reason, "message": "probe", "type": "Normal",
            "source": {"component": "cluster-tier-probe"}, "reportingComponent": "cluster-tier-probe",
            "reportingInstance": "probe", "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1}


def test_loopback_pod_ip_accepted_but_not_in_endpoints(scenario, control_plane):
    s = scenario("facts-loopback")
    ns = s.namespace("x", None)
    s.deployment(ns, "engine", 1)
    (pod,) = s.ready_pods(ns, "engine", 1)  # the kubelet stand-in set a 127.10.x.y podIP: accepted
    assert pod["status"]["podIP"].startswith("127.")
    with pytest.raises(ApiError) as slice_refused:
        s.api.create(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "probe"},
            "addressType": "IPv4", "endpoints": [{"addresses": [pod["status"]["podIP"]]}],
            "ports": [{"name": "http", "port": 8000}]})
    assert slice_refused.value.status == 422 and "loopback" in str(slice_refused.value)
    with pytest.raises(ApiError) as endpoints_refused:
        s.api.create(f"/api/v1/namespaces/{ns}/endpoints", {
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "probe"},
            "subsets": [{"addresses": [{"ip": pod["status"]["podIP"]}], "ports": [{"port": 8000}]}]})
    assert endpoints_refused.value.status == 422 and "loopback" in str(endpoints_refused.value)


def test_node_events_only_in_default(scenario, release, control_plane):
    s = scenario("facts-events")
    ns = s.namespace("x", None)
    api = _as(control_plane, release())
    node = control_plane.api.get("/api/v1/nodes/node-a")
    involved = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": node["metadata"]["uid"]}
    with pytest.raises(ApiError) as refused:
        api.create(f"/api/v1/namespaces/{ns}/events", _event(ns, involved))
    assert refused.value.status == 422, refused.value
    created = api.create("/api/v1/namespaces/default/events", _event("default", involved))
    assert created["metadata"]["namespace"] == "default"
    # A namespaced object's Event must be in that object's namespace.
    with pytest.raises(ApiError) as mismatch:
        api.create("/api/v1/namespaces/default/events", _event("default", {
            "apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": ns, "uid": "1"}))
    assert mismatch.value.status == 422


def test_a_named_event_is_written_once(scenario, release, control_plane):
    s = scenario("facts-named-event")
    ns = s.namespace("x", None)
    s.deployment(ns, "engine", 1)
    (pod,) = s.ready_pods(ns, "engine", 1)
    api = _as(control_plane, release())
    involved = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    body = event_body(ns, involved, REASON_TARGETS_OVERLAP, "first", "probe", dt.datetime.now(dt.UTC), once=True)
    created = api.create(f"/api/v1/namespaces/{ns}/events", body)
    assert created["metadata"]["name"] == f"{pod['metadata']['uid']}.stalltargetsoverlap"
    again = event_body(ns, involved, REASON_TARGETS_OVERLAP, "second", "probe", dt.datetime.now(dt.UTC), once=True)
    with pytest.raises(ApiError) as refused:
        api.create(f"/api/v1/namespaces/{ns}/events", again)
    assert refused.value.status == 409, refused.value
    [kept] = [e for e in control_plane.api.get(f"/api/v1/namespaces/{ns}/events")["items"]
              if e["reason"] == REASON_TARGETS_OVERLAP]
    assert kept["message"] == "first"


def test_label_selectors_are_validated(release, control_plane):
    api = _as(control_plane, release())
    for bad in ("a b", "=x", "app.kubernetes.io/name=vllm,,", "x in (a,b", "!"):
        with pytest.raises(ApiError) as refused:
            api.get("/api/v1/pods", labelSelector=bad)
        assert refused.value.status == 400, (bad, refused.value)
    # Not refused by v1.35 (contrary to a reading of the source): an empty set and an empty value.
    for odd in ("app in ()", "app notin ()", "app="):
        assert api.request("GET", "/api/v1/pods", params={"labelSelector": odd})[0] == 200, odd


def test_delete_uid_precondition_enforced(scenario, release, control_plane):
    s = scenario("facts-precondition")
    ns = s.namespace("x", None)
    s.deployment(ns, "engine", 1, grace_s=1)
    (pod,) = s.ready_pods(ns, "engine", 1)
    api = _as(control_plane, release())
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
    status, body = api.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                     "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}, ok=(409,))
    assert status == 409, body
    assert not s.pod(ns, pod["metadata"]["name"])["metadata"].get("deletionTimestamp")


def test_a_status_patch_carrying_another_uid_is_refused_as_uid_immutable(scenario, control_plane):
    """What the readiness gate's patch relies on (KubeClient.patch_pod_condition maps exactly this to
    "conflict"): pods/status with a metadata.uid that is not the pod's is a 422 naming metadata.uid, and nothing
    is written; with the pod's own uid it is applied."""
    s = scenario("facts-status-uid")
    ns = s.namespace("x", None)
    s.deployment(ns, "engine", 1, grace_s=1)
    (pod,) = s.ready_pods(ns, "engine", 1)
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status"
    condition = {"type": "vllm-watchdog.io/engine-progressing", "status": "False"}
    patch = {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}, "status": {"conditions": [condition]}}
    status, body = s.api.request("PATCH", path, patch, content_type="application/strategic-merge-patch+json",
                                 ok=(422,))
    assert status == 422 and "metadata.uid" in body["message"], body
    assert condition["type"] not in {c["type"] for c in s.pod(ns, pod["metadata"]["name"])["status"]["conditions"]}
    patch["metadata"]["uid"] = pod["metadata"]["uid"]
    s.api.request("PATCH", path, patch, content_type="application/strategic-merge-patch+json")
    got = {c["type"]: c["status"] for c in s.pod(ns, pod["metadata"]["name"])["status"]["conditions"]}
    assert got[condition["type"]] == "False"


def test_eviction_without_pdb_writes_disruption_target(scenario, release, control_plane):
    s = scenario("facts-evict")
    ns = s.namespace("x", None)
    s.deployment(ns, "engine", 1, grace_s=5)
    (pod,) = s.ready_pods(ns, "engine", 1)
    meta = pod["metadata"]
    api = _as(control_plane, release("wd-evict", EVICT_CONFIG))
    status, _ = api.request("POST", f"/api/v1/namespaces/{ns}/pods/{meta['name']}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"], "namespace": ns},
        "deleteOptions": {"preconditions": {"uid": meta["uid"]}}})
    assert status == 201
    evicted = s.pod(ns, meta["name"])
    assert evicted["metadata"].get("deletionTimestamp")
    conditions = {c["type"]: c for c in evicted["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["status"] == "True"
    assert conditions["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"


def test_terminating_namespace_refuses_creates_but_not_deletes(scenario, release, control_plane):
    s = scenario("facts-terminating")
    ns = s.namespace("x", None)
    # A finalizer on a ConfigMap keeps the namespace Terminating while the test looks at it.
    s.api.create(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "hold", "finalizers": ["cluster-tier.vllm-watchdog.io/hold"]}})
    s.deployment(ns, "engine", 1, grace_s=30)
    (pod,) = s.ready_pods(ns, "engine", 1)
    s.api.delete(f"/api/v1/namespaces/{ns}")
    wait_for("namespace Terminating", lambda: s.api.get(f"/api/v1/namespaces/{ns}")["status"]["phase"] ==
             "Terminating")
    api = _as(control_plane, release())
    with pytest.raises(ApiError) as refused:
        api.create(f"/api/v1/namespaces/{ns}/events", _event(ns, {
            "apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "namespace": ns,
            "uid": pod["metadata"]["uid"]}))
    assert refused.value.status == 403 and "being terminated" in str(refused.value), refused.value
    evictor = _as(control_plane, release("wd-evict", EVICT_CONFIG))
    with pytest.raises(ApiError) as evict_refused:
        evictor.create(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod["metadata"]["name"]}})
    assert evict_refused.value.status == 403, evict_refused.value
    # Deletes pass (the namespace controller's own deletion of the pod is graceful: it is still there).
    status, body = api.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", {
        "apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod["metadata"]["uid"]}}, ok=())
    assert status == 200, body
    s.api.merge_patch(f"/api/v1/namespaces/{ns}/configmaps/hold", {"metadata": {"finalizers": None}})


def test_stale_uid_eviction_spends_the_pdb_budget(scenario, release, control_plane):
    """The eviction's UID precondition is checked after the PodDisruptionBudget logic: an eviction of a pod
    that was replaced under the same name (stale UID) gets 409, yet the PDB has recorded the disruption, so the
    next, valid eviction is refused (429) until the disruption controller expires that entry (~2 min)."""
    s = scenario("facts-stale-evict")
    ns = s.namespace("x", None)
    s.deployment(ns, "engine", 2)
    pods = s.ready_pods(ns, "engine", 2)
    s.api.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "engine"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "engine"}}}})
    pdb_path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/engine"
    wait_for("PDB allows 1", lambda: (s.api.get(pdb_path).get("status") or {}).get("disruptionsAllowed") == 1,
             timeout=30)
    api = _as(control_plane, release("wd-evict", EVICT_CONFIG))

    def evict(pod: dict, uid: str) -> int:
        name = pod["metadata"]["name"]
        return api.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name},
            "deleteOptions": {"preconditions": {"uid": uid}}}, ok=(409, 429))[0]

    assert evict(pods[0], "00000000-0000-0000-0000-000000000000") == 409
    status = s.api.get(pdb_path)["status"]
    assert pods[0]["metadata"]["name"] in status.get("disruptedPods", {}) and status["disruptionsAllowed"] == 0
    assert evict(pods[1], pods[1]["metadata"]["uid"]) == 429
    assert not s.pod(ns, pods[0]["metadata"]["name"])["metadata"].get("deletionTimestamp")
