"""Scenario 8 on a real control plane: what the chart's ServiceAccount may and may not do, asked of the real RBAC
authorizer with real ``kubectl auth can-i --as system:serviceaccount:NS:SA`` (impersonation by the admin)."""

from __future__ import annotations

import time

import pytest
from cluster_kit import EVICT_CONFIG, LEADER_CONFIG, NODES_CONFIG

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.chart import run_tool
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster

# (verb, resource[, extra kubectl args]) the watchdog must never be able to do, in every chart configuration.
NEVER = [
    ("get", "secrets", "-A"),
    ("list", "secrets", "-A"),
    ("create", "pods", "--subresource=exec", "-n", "default"),
    ("create", "pods", "-n", "default"),
    ("patch", "deployments", "-n", "default"),
    ("update", "deployments", "-n", "default"),
    ("delete", "nodes"),
    ("delete", "namespaces"),
    ("create", "serviceaccounts", "--subresource=token", "-n", "default"),
    ("impersonate", "serviceaccounts"),
    ("escalate", "clusterroles"),
    ("bind", "clusterroles"),
    ("create", "leases", "-n", "default"),
    ("*", "*"),
]
# What the code calls (action=delete, no leader election, no node escalation).
DEFAULT_ALLOWED = [
    ("list", "pods", "-A"),
    ("watch", "pods", "-A"),  # the discovery cache: LIST once, then WATCH
    ("get", "pods", "-n", "default"),
    ("delete", "pods", "-n", "default"),
    ("list", "namespaces"),
    ("watch", "namespaces"),
    ("create", "events", "-n", "default"),
    ("get", "replicasets", "-n", "default"),
    ("get", "deployments", "-n", "default"),
    ("get", "statefulsets", "-n", "default"),
]


def can_i(kubectl: str, plane, release, *args: str) -> bool:
    done = run_tool([kubectl, "--kubeconfig", str(plane.admin_kubeconfig), "auth", "can-i", *args, "--as",
                     release.user], check=False)
    assert done.stdout.strip() in ("yes", "no"), (args, done.stdout, done.stderr)
    return done.stdout.strip() == "yes"


def _check(kubectl, plane, release, allowed, denied) -> None:
    wrong = [("allowed" if can_i(kubectl, plane, release, *a) else "denied", a) for a in allowed]
    wrong = [w for w in wrong if w[0] != "allowed"]
    wrong += [("allowed", d) for d in denied if can_i(kubectl, plane, release, *d)]
    assert not wrong, f"{release.user}: {wrong}"


def test_default_release(release, kubectl, control_plane):
    rel = release()
    ledger = "configmap/vllm-stall-watchdog-ledger"
    _check(kubectl, control_plane, rel, [
        *DEFAULT_ALLOWED, ("get", ledger, "-n", rel.namespace), ("update", ledger, "-n", rel.namespace),
        ("create", "configmaps", "-n", rel.namespace),  # the first deletion creates the ledger
        ("get", f"configmap/{rel.fullname}", "-n", rel.namespace),  # the run-time brake: read its own config
    ], [
        *NEVER, ("create", "pods", "--subresource=eviction", "-n", "default"), ("patch", "nodes"),
        ("get", "nodes"), ("get", "leases", "-n", rel.namespace), ("update", "leases", "-n", rel.namespace),
        ("watch", "events", "-A"), ("list", "events", "-A"), ("watch", "replicasets", "-A"),
        ("patch", "events", "-n", "default"),
        # no other ConfigMap: its own config read only, not another namespace's, no list/delete
        ("update", f"configmap/{rel.fullname}", "-n", rel.namespace),
        ("update", "configmap/other", "-n", rel.namespace),
        ("get", ledger, "-n", "default"), ("list", "configmaps", "-n", rel.namespace),
        ("delete", ledger, "-n", rel.namespace), ("create", "configmaps", "-n", "default")])


def test_evict_release_cannot_delete_pods(release, kubectl, control_plane):
    rel = release("wd-evict", EVICT_CONFIG)
    allowed = [a for a in DEFAULT_ALLOWED if a[:2] != ("delete", "pods")]
    _check(kubectl, control_plane, rel, [*allowed, ("create", "pods", "--subresource=eviction", "-n", "default")],
           [*NEVER, ("delete", "pods", "-n", "default"), ("delete", "pods", "-A")])


def test_leader_release_holds_only_its_own_lease(release, kubectl, control_plane):
    rel = release("wd-leader", LEADER_CONFIG)
    ns = rel.namespace
    _check(kubectl, control_plane, rel, [
        *DEFAULT_ALLOWED,
        ("create", "leases", "-n", ns),
        ("get", "leases/vllm-stall-watchdog", "-n", ns),
        ("update", "leases/vllm-stall-watchdog", "-n", ns),
    ], [
        *NEVER,
        ("get", "leases/another-lease", "-n", ns),
        ("update", "leases/another-lease", "-n", ns),
        ("delete", "leases/vllm-stall-watchdog", "-n", ns),
        ("patch", "leases/vllm-stall-watchdog", "-n", ns),
        ("list", "leases", "-n", ns),
        ("create", "leases", "-n", "kube-system"),
        ("get", "leases/vllm-stall-watchdog", "-n", "kube-system"),
    ])


def test_node_escalation_release_may_patch_nodes_only(release, kubectl, control_plane):
    rel = release("wd-nodes", NODES_CONFIG)
    _check(kubectl, control_plane, rel, [*DEFAULT_ALLOWED, ("get", "nodes/node-gpu"), ("patch", "nodes/node-gpu")],
           [*NEVER, ("list", "nodes"), ("update", "nodes"), ("patch", "nodes", "--subresource=status")])


def test_namespace_only_release_acts_in_its_namespace_and_cannot_list_pods_elsewhere(
        scenario, watchdogs, release, kubelet, kubectl, control_plane):
    """Issue 30 item 5: watchNamespaces installs Roles in the named namespace only. The real authorizer says the
    ServiceAccount cannot list pods elsewhere (nor cluster-wide); the watchdog, listing and watching pods in the
    named namespace alone, deletes a wedged pod there and never touches an equally wedged pod of another opted-in
    namespace."""
    s = scenario("s-scoped")
    named, other = s.namespace("named", "true"), s.namespace("other", "true")
    for ns in (named, other):
        s.deployment(ns, "engine", 2, grace_s=15)
    named_pods, other_pods = s.ready_pods(named, "engine", 2), s.ready_pods(other, "engine", 2)
    rel = release("wd-scoped", None, watchNamespaces=[named])
    _check(kubectl, control_plane, rel, [
        ("list", "pods", "-n", named), ("watch", "pods", "-n", named), ("delete", "pods", "-n", named),
        ("create", "events", "-n", named), ("get", "replicasets", "-n", named), ("list", "namespaces"),
    ], [
        *NEVER, ("list", "pods", "-A"), ("watch", "pods", "-A"), ("list", "pods", "-n", other),
        ("delete", "pods", "-n", other), ("create", "events", "-n", other), ("get", "replicasets", "-n", other),
    ])
    wd = watchdogs(rel, s.name)
    wedged, bystander = named_pods[0]["metadata"], other_pods[0]["metadata"]
    kubelet.sim_for(named, wedged["name"]).set_mode("wedged")
    kubelet.sim_for(other, bystander["name"]).set_mode("wedged")
    wait_for(f"{named}/{wedged['name']} Terminating",
             lambda: ((s.pod(named, wedged["name"]) or {"metadata": {"deletionTimestamp": "gone"}})["metadata"]
                      .get("deletionTimestamp")), timeout=45, describe=lambda: wd.log()[-3000:])
    time.sleep(6)  # more than a window more: the other namespace's wedged pod stays
    still = s.pod(other, bystander["name"])
    assert still is not None and still["metadata"]["uid"] == bystander["uid"]
    assert "deletionTimestamp" not in still["metadata"]
    listed = audit(control_plane, rel.user, verb="list", resource="pods")
    assert listed and {e["objectRef"].get("namespace") for e in listed} == {named}, listed[:3]
    assert not [e for e in audit(control_plane, rel.user) if e["responseStatus"]["code"] == 403]


def test_namespace_only_node_escalation_creates_events_in_default_alone(scenario, release, kubectl, control_plane):
    """Issue 36 item 10: with watchNamespaces and nodeEscalation the chart granted events create in every namespace
    (ClusterRole) for the one Node Event, which the watchdog writes in default. The real authorizer now allows that
    create in default (a Role there) and in the named namespace (its pods' Events), and refuses it elsewhere."""
    s = scenario("s-node-events")
    named, other = s.namespace("named", "true"), s.namespace("other", "true")
    rel = release("wd-scoped-nodes", NODES_CONFIG, watchNamespaces=[named])
    _check(kubectl, control_plane, rel, [
        ("create", "events", "-n", "default"), ("create", "events", "-n", named), ("get", "nodes/node-gpu"),
        ("patch", "nodes/node-gpu"), ("list", "namespaces"),
    ], [
        *NEVER, ("create", "events", "-n", other), ("create", "events", "-n", "kube-system"),
        ("create", "events", "-A"), ("list", "events", "-n", "default"), ("get", "events", "-n", "default"),
        ("list", "pods", "-n", "default"), ("list", "nodes"),
    ])
