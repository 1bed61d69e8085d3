"""Conformance of the simulation's in-memory API (``tests/sim/sim_api.py``) with the real kube-apiserver (issue 37):
the same operation sequences, through the same client interface the watchdog uses (``watchdog.adapters.kube.
KubeClient`` on the real side, :class:`sim_api.SimKube`, which stands in for it in ``wiring.build``, on the other),
replayed against both; their answers, normalised, must be equal.

Each sequence builds its world through a :class:`Side` (namespaces with labels, Running pods with UIDs and owners,
PodDisruptionBudgets that allow no disruption, Nodes, per-namespace RBAC, a namespace deleted): on the real side as
the admin through the API (the namespace controller and RBAC do the rest), on the sim side by writing the
:class:`sim_api.Store` the way ``sim_world`` does. The calls under test are made as a ServiceAccount: ``wide``
(the chart's cluster-wide rules) or ``narrow`` (namespace-only mode: the pod, Event and owner rules bound per
namespace by a RoleBinding; a namespace without one is the sim's ``Store.forbidden``).

An answer is normalised to what the watchdog can tell apart: the result value (``"deleted"``, ``"conflict"``,
``"blocked"``, ``"several_pdbs"``, None, ...), ``("HTTP", status)`` for a :class:`KubeError`, and of each object the
fields the watchdog reads (names, labels' effect on a LIST, Terminating, the deletion grace period, the
``DisruptionTarget`` and gate conditions, ConfigMap data, Lease holder, Node taints) with UIDs and resourceVersions
replaced by the order in which each side first showed them (so "the resourceVersion of the create" and "a new one"
compare, not the numbers).

The faults the sim injects at every call (:data:`sim_api.WRITE_FAULTS`, :data:`sim_api.LIST_FAULTS`) are network and
process faults; the real server cannot be made to produce them on request, so none is replayed here:
:data:`NOT_REPLAYED` says why for each (and the cluster tier's fault proxy, ``test_cluster_faults.py``, covers lost
answers and 5xx against the real watchdog). What the real server does produce on request (resourceVersion and UID
precondition conflicts, PDB refusals, RBAC refusals, a Terminating or deleted namespace, a malformed selector) is in
the sequences.
"""

from __future__ import annotations

import datetime as dt
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))  # sim_api

from sim_api import LIST_FAULTS, READ_FAULTS, WRITE_FAULTS, Faults, SimKube, Store

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.core.events import event_body
from watchdog.core.model import GATE_CONDITION
from watchdog.demo.controlplane.api import Api, wait_for
from watchdog.demo.controlplane.plane import ControlPlane

pytestmark = pytest.mark.cluster

#: Every fault the sim injects, and why the conformance test does not replay it against the real server.
NOT_REPLAYED = {
    "lost": "an answer lost after the write was applied is a network fault (the fault proxy's status_after/drop)",
    "5xx": "a 5xx without applying is an overloaded or failing server, not an answer to a request (fault proxy)",
    "timeout": "a timeout is the client's deadline on a silent connection (fault proxy: hold/freeze)",
    "429": "API Priority and Fairness 429s could not be made deterministic on this server (test_cluster_evict.py)",
    "crash_before": "the watchdog process killed before a call: nothing reaches the server",
    "crash_after": "the process killed after a write was applied: the server's side is an applied write",
    "pause": "the process frozen at a call: time passes, nothing differs at the server",
    "stale": "a stale watch-cache LIST (resourceVersion=0) happens, but not on request; the real side waits it out",
}

SYSTEM_NS = "cf-system"
WATCHED_CONDITIONS = ("DisruptionTarget", GATE_CONDITION)
LABEL = {"app.kubernetes.io/name": "vllm"}
SELECTOR = "app.kubernetes.io/name=vllm"
NOW = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
NAMESPACED_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"], "verbs": ["get"]},
]
CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
]
LIST_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
#: Each identity: its ClusterRoles bound cluster-wide (the namespaced rules of the others come per RoleBinding).
IDENTITIES = {"wide": ("cf-namespaced", "cf-cluster"), "narrow": ("cf-cluster",),
              "mixed": ("cf-cluster", "cf-list")}


# -- the two sides -------------------------------------------------------------------------------------------------
class Side:
    """One world a sequence runs in: the setup (as the cluster's admin and controllers) and the client under test
    (:attr:`kube`, as the identity); :meth:`call` records each answer, normalised."""

    kube: Any

    def __init__(self, prefix: str, identity: str) -> None:
        self.prefix, self.identity = prefix, identity
        self.answers: list[tuple[str, Any]] = []
        self._symbols: dict[tuple[str, str], str] = {}

    # normalisation ------------------------------------------------------------------------------------------
    def sym(self, kind: str, value: Any) -> str | None:
        if value in (None, ""):
            return None
        return self._symbols.setdefault((kind, str(value)), f"{kind}{sum(k == kind for k, _ in self._symbols) + 1}")

    def ours(self, namespace: str | None) -> bool:
        return bool(namespace) and str(namespace).startswith(self.prefix)

    def pod(self, pod: dict[str, Any] | None) -> Any:
        if pod is None:
            return None
        meta, status = pod["metadata"], pod.get("status") or {}
        return (f"{meta['namespace']}/{meta['name']}", self.sym("uid", meta["uid"]),
                "Terminating" if meta.get("deletionTimestamp") else "live", meta.get("deletionGracePeriodSeconds"),
                tuple(sorted((c["type"], c["status"]) for c in status.get("conditions") or []
                             if c.get("type") in WATCHED_CONDITIONS)))

    def pods(self, pods: list[dict[str, Any]]) -> Any:
        return sorted((self.pod(p) for p in pods if self.ours(p["metadata"]["namespace"])), key=str)

    def namespace(self, ns: dict[str, Any] | None) -> Any:
        return None if ns is None else (ns["metadata"]["name"], "Terminating" if ns["metadata"].get(
            "deletionTimestamp") else "Active")

    def namespaces(self, items: list[dict[str, Any]]) -> Any:
        return sorted(self.namespace(n) for n in items if self.ours(n["metadata"]["name"]))

    def config_map(self, cm: dict[str, Any] | None) -> Any:
        return None if cm is None else (cm["metadata"]["name"], cm.get("data") or {},
                                        self.sym("rv", cm["metadata"]["resourceVersion"]))

    def lease(self, lease: dict[str, Any] | None) -> Any:
        return None if lease is None else (lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity"),
                                           self.sym("rv", lease["metadata"]["resourceVersion"]))

    def node(self, node: dict[str, Any] | None) -> Any:
        if node is None:
            return None
        taints = [(t["key"], t.get("value"), t["effect"]) for t in (node.get("spec") or {}).get("taints") or []]
        return node["metadata"]["name"], taints, self.sym("rv", node["metadata"]["resourceVersion"])

    def owner(self, obj: dict[str, Any] | None) -> Any:
        return None if obj is None else (obj["metadata"]["name"], self.sym("uid", obj["metadata"]["uid"]))

    def call(self, label: str, fn: Callable[..., Any], *args: Any, view: Callable[[Any], Any] | None = None) -> Any:
        """Call ``fn(*args)`` on the client; record ``label`` and the normalised answer; return the raw answer (None
        when it raised)."""
        try:
            value = fn(*args)
        except KubeError as e:
            self.answers.append((label, ("HTTP", e.status)))
            return None
        except ValueError as e:
            self.answers.append((label, ("ValueError", type(e).__name__)))
            return None
        self.answers.append((label, view(value) if view else value))
        return value

    # the world: what the admin, the controllers and the kubelet do (each side its own way) --------------------
    def other_client(self) -> Any: ...  # the client of a second replica
    def make_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        raise NotImplementedError

    def make_pod(self, ns: str, name: str, *, labels: dict[str, str] | None = None, grace: int = 300,
                 phase: str = "Running", ready: bool = True) -> str:
        """Its UID; Running on node cf-node (Ready unless ``ready`` is False), unless ``phase`` is Pending."""
        raise NotImplementedError

    def remove_pod(self, ns: str, name: str) -> None: ...  # gone (a force delete)
    def make_pdb(self, ns: str, name: str, labels: dict[str, str]) -> None: ...  # allowing no disruption
    def make_node(self, name: str) -> None: ...
    def make_replica_set(self, ns: str, name: str) -> str:
        raise NotImplementedError

    def grant(self, ns: str) -> None: ...  # narrow: a RoleBinding in ns
    def revoke(self, ns: str) -> None: ...  # narrow: that RoleBinding deleted
    def terminate_namespace(self, ns: str) -> None: ...  # deleted: Terminating, its pods deleted gracefully
    def finish_namespace(self, ns: str) -> None: ...  # its pods gone, then the namespace
    def settle(self) -> None: ...  # what a LIST answers is up to date


class SimSide(Side):
    """The world as :class:`sim_api.Store` holds it; the client is a :class:`SimKube` that never faults."""

    def __init__(self, prefix: str, identity: str) -> None:
        super().__init__(prefix, identity)
        self.store = Store()
        self.kube = SimKube(self.store, "r0", Faults())
        self._uid = itertools.count(1)

    def other_client(self) -> SimKube:
        return SimKube(self.store, "r1", Faults())

    def _next_uid(self) -> str:
        return f"sim-{next(self._uid):04d}"

    def make_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        self.store.namespaces[name] = {"metadata": {"name": name, "uid": self._next_uid(), "labels": labels or {}}}
        if self.identity != "wide":
            self.store.forbidden.add(name)  # no RoleBinding there until granted
        return name

    def make_pod(self, ns: str, name: str, *, labels: dict[str, str] | None = None, grace: int = 300,
                 phase: str = "Running", ready: bool = True) -> str:
        uid = self._next_uid()
        self.store.pods[(ns, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": self.store.next_rv(),
                         "labels": dict(LABEL if labels is None else labels)},
            "spec": {"nodeName": "cf-node", "terminationGracePeriodSeconds": grace,
                     "containers": [{"name": "engine"}]},
            "status": {"phase": phase, **({"podIP": "127.77.0.1", "conditions": [
                {"type": "Ready", "status": str(ready)}]} if phase == "Running" else {})}}
        return uid

    def remove_pod(self, ns: str, name: str) -> None:
        self.store.pods.pop((ns, name), None)

    def make_pdb(self, ns: str, name: str, labels: dict[str, str]) -> None:
        self.store.pdbs.setdefault(ns, []).append(dict(labels))

    def make_node(self, name: str) -> None:
        self.store.nodes[name] = {"metadata": {"name": name, "resourceVersion": self.store.next_rv()}, "spec": {}}

    def make_replica_set(self, ns: str, name: str) -> str:
        uid = self._next_uid()
        self.store.owners[("ReplicaSet", ns, name)] = {"metadata": {"name": name, "namespace": ns, "uid": uid}}
        return uid

    def grant(self, ns: str) -> None:
        self.store.forbidden.discard(ns)

    def revoke(self, ns: str) -> None:
        self.store.forbidden.add(ns)

    def terminate_namespace(self, ns: str) -> None:
        """The namespace deleted: Terminating; the namespace controller deletes its pods gracefully (as
        ``sim_world``'s ``namespace_deleted`` event) and nothing else until they are gone (its RoleBindings stay)."""
        self.store.namespaces[ns]["metadata"]["deletionTimestamp"] = "t"
        self.store.namespaces[ns]["status"] = {"phase": "Terminating"}
        for (pod_ns, _), pod in self.store.pods.items():
            if pod_ns == ns and not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = "t"
                pod["metadata"]["deletionGracePeriodSeconds"] = pod["spec"]["terminationGracePeriodSeconds"]

    def finish_namespace(self, ns: str) -> None:
        """Its pods gone (the kubelet), then the namespace and everything in it: under namespace-only RBAC its
        RoleBinding too (403 from then on, not 404)."""
        self.store.namespaces.pop(ns)
        if self.identity != "wide":
            self.store.forbidden.add(ns)
        for table in (self.store.pods, self.store.config_maps, self.store.leases):
            for key in [k for k in table if k[0] == ns]:
                del table[key]

    def settle(self) -> None:
        pass  # the store answers every LIST from the current state


class RealSide(Side):
    """The real control plane: the world made as the admin, the client a :class:`KubeClient` as the identity."""

    def __init__(self, prefix: str, identity: str, plane: ControlPlane, clients: dict[str, KubeClient]) -> None:
        super().__init__(prefix, identity)
        assert plane.api is not None
        self.api: Api = plane.api
        self.kube = clients[identity]
        self._other = clients[f"{identity}-2"]
        self.made: list[str] = []

    def other_client(self) -> KubeClient:
        return self._other

    def make_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name, "labels": labels or {}}})
        self.made.append(name)
        wait_for(f"ServiceAccount {name}/default", lambda: self.api.find(
            f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=20)
        return name

    def make_pod(self, ns: str, name: str, *, labels: dict[str, str] | None = None, grace: int = 300,
                 phase: str = "Running", ready: bool = True) -> str:
        pod = self.api.create(f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(LABEL if labels is None else labels)},
            "spec": {"nodeName": "cf-node", "terminationGracePeriodSeconds": grace,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "engine", "image": "engine:conformance"}]}})
        if phase == "Running":  # what a kubelet would report (no kubelet runs cf-node)
            self.api.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {
                "phase": "Running", "podIP": "127.77.0.1", "conditions": [{"type": "Ready", "status": str(ready)}]}},
                content_type="application/strategic-merge-patch+json")
        return str(pod["metadata"]["uid"])

    def remove_pod(self, ns: str, name: str) -> None:
        self.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
        wait_for(f"pod {ns}/{name} gone", lambda: self.api.find(f"/api/v1/namespaces/{ns}/pods/{name}") is None)

    def make_pdb(self, ns: str, name: str, labels: dict[str, str]) -> None:
        self.api.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}}})

    def make_node(self, name: str) -> None:
        """A Node without taints (the API server's admission gives a new Node ``node.kubernetes.io/not-ready``, which
        the node lifecycle controller, not running here, would lift once the kubelet reports Ready)."""
        self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        self.api.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})

    def make_replica_set(self, ns: str, name: str) -> str:
        labels = {"cf": name}
        rs = self.api.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{"name": "e", "image": "e"}]}}}})
        return str(rs["metadata"]["uid"])

    def _allowed(self, ns: str) -> bool:
        review = self.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
                "user": f"system:serviceaccount:{SYSTEM_NS}:cf-{self.identity}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NS}", "system:authenticated"],
                "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "pods"}}})
        return bool(review["status"].get("allowed"))

    def grant(self, ns: str) -> None:
        self.api.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "cf-grant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cf-namespaced"},
            "subjects": [{"kind": "ServiceAccount", "name": f"cf-{self.identity}", "namespace": SYSTEM_NS}]})
        wait_for(f"RBAC granted in {ns}", lambda: self._allowed(ns))

    def revoke(self, ns: str) -> None:
        self.api.delete(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/cf-grant")
        wait_for(f"RBAC revoked in {ns}", lambda: not self._allowed(ns))

    def terminate_namespace(self, ns: str) -> None:
        self.api.delete(f"/api/v1/namespaces/{ns}")
        pods = f"/api/v1/namespaces/{ns}/pods"
        wait_for(f"the namespace controller deleting the pods of {ns}", lambda: all(
            p["metadata"].get("deletionTimestamp") for p in self.api.get(pods)["items"]), timeout=30)

    def finish_namespace(self, ns: str) -> None:
        for pod in self.api.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
            self.api.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
        wait_for(f"namespace {ns} gone", lambda: self.api.find(f"/api/v1/namespaces/{ns}") is None, timeout=60)
        if self.identity != "wide":  # its RoleBinding went with it: wait for the authorizer's cache
            wait_for(f"RBAC gone with {ns}", lambda: not self._allowed(ns))

    def settle(self) -> None:
        """Wait until the watch cache (what a ``resourceVersion=0`` LIST reads) has caught up with etcd."""
        for path in ("/api/v1/pods", "/api/v1/namespaces"):
            latest = int(self.api.get(path, limit=1)["metadata"]["resourceVersion"])

            def cached(path: str = path, latest: int = latest) -> bool:
                return int(self.api.get(path, limit=1, resourceVersion="0")["metadata"]["resourceVersion"]) >= latest
            wait_for(f"watch cache of {path} at {latest}", cached, interval=0.05)

    def cleanup(self) -> None:
        """The namespaces deleted, their pods at once (no kubelet would ever finish their graceful deletion)."""
        for name in self.made:
            self.api.delete(f"/api/v1/namespaces/{name}/pods", {"gracePeriodSeconds": 0})
            self.api.delete(f"/api/v1/namespaces/{name}", ok=(404, 409))


# -- the operation sequences -----------------------------------------------------------------------------------
# Each takes a Side ``w`` and its namespace prefix ``p`` and makes its calls through ``w.call(label, w.kube.X, ...)``.
def seq_delete(w: Side, p: str) -> None:
    """DELETE with the UID precondition: a stale UID (409), a missing pod (404), the pod's own grace period, a
    second DELETE of a Terminating pod, a pod whose own grace period is 0 (gone at once), a name reused by a new
    pod (the old UID: 409)."""
    ns = w.make_namespace(f"{p}-a")
    k = w.kube
    uid = w.make_pod(ns, "p1")
    w.call("delete p1 stale uid", k.delete_pod, ns, "p1", "00000000-0000-0000-0000-000000000000", None)
    w.call("delete missing", k.delete_pod, ns, "nope", uid, None)
    w.call("delete p1", k.delete_pod, ns, "p1", uid, None)
    w.call("get p1 (Terminating)", k.get_pod, ns, "p1", view=w.pod)
    w.call("delete p1 again", k.delete_pod, ns, "p1", uid, None)
    w.call("get p1 after second delete", k.get_pod, ns, "p1", view=w.pod)
    w.call("delete p1 again, shorter grace", k.delete_pod, ns, "p1", uid, 30)
    w.call("get p1 after shorter grace", k.get_pod, ns, "p1", view=w.pod)
    uid0 = w.make_pod(ns, "p0", grace=0)
    w.call("delete p0 (own grace 0)", k.delete_pod, ns, "p0", uid0, None)
    w.call("get p0 after grace-0 delete", k.get_pod, ns, "p0", view=w.pod)
    uid2 = w.make_pod(ns, "p2")
    w.call("delete p2 grace 0", k.delete_pod, ns, "p2", uid2, 0)
    w.call("get p2 after grace-0 delete", k.get_pod, ns, "p2", view=w.pod)
    old = w.make_pod(ns, "p3")
    w.remove_pod(ns, "p3")
    w.make_pod(ns, "p3")
    w.call("delete p3 with the old uid", k.delete_pod, ns, "p3", old, None)
    w.call("get p3 (the new one)", k.get_pod, ns, "p3", view=w.pod)


def seq_evict(w: Side, p: str) -> None:
    """Eviction: no PDB (201, DisruptionTarget); a PDB allowing none (429); a stale UID under it; two PDBs (500);
    a missing pod; a stale UID without PDB; a Terminating, a Pending and a Running but not Ready pod under a
    PDB."""
    ns = w.make_namespace(f"{p}-a")
    k = w.kube
    free = w.make_pod(ns, "free", labels={"app": "free"})
    guarded = w.make_pod(ns, "guarded", labels={"app": "guarded"})
    double = w.make_pod(ns, "double", labels={"app": "double", "tier": "x"})
    pending = w.make_pod(ns, "pending", labels={"app": "guarded"}, phase="Pending")
    unready = w.make_pod(ns, "unready", labels={"app": "guarded"}, ready=False)
    w.make_pdb(ns, "guard", {"app": "guarded"})
    w.make_pdb(ns, "double-1", {"app": "double"})
    w.make_pdb(ns, "double-2", {"tier": "x"})
    w.call("evict free, stale uid", k.evict_pod, ns, "free", "00000000-0000-0000-0000-000000000000", None)
    w.call("evict free", k.evict_pod, ns, "free", free, None)
    w.call("get free", k.get_pod, ns, "free", view=w.pod)
    w.call("evict guarded (PDB allows 0)", k.evict_pod, ns, "guarded", guarded, None)
    w.call("evict guarded, stale uid", k.evict_pod, ns, "guarded", "00000000-0000-0000-0000-000000000000", None)
    w.call("get guarded", k.get_pod, ns, "guarded", view=w.pod)
    w.call("evict double (two PDBs)", k.evict_pod, ns, "double", double, None)
    w.call("evict missing", k.evict_pod, ns, "nope", free, None)
    w.call("evict pending (PDB)", k.evict_pod, ns, "pending", pending, None)
    w.call("evict unready (PDB)", k.evict_pod, ns, "unready", unready, None)
    w.call("delete guarded", k.delete_pod, ns, "guarded", guarded, None)
    w.call("evict guarded while Terminating", k.evict_pod, ns, "guarded", guarded, None)


def seq_pod_status(w: Side, p: str) -> None:
    """pods/status: the gate condition set, replaced by type, refused for another pod under the name (422 ->
    conflict), a missing pod (404)."""
    ns = w.make_namespace(f"{p}-a")
    k = w.kube
    uid = w.make_pod(ns, "p1")
    gate = {"type": GATE_CONDITION, "status": "False", "reason": "EngineStalled", "message": "m",
            "lastTransitionTime": "2026-12-06T00:00:00Z"}
    w.call("patch gate False", k.patch_pod_condition, ns, "p1", uid, gate)
    w.call("get p1", k.get_pod, ns, "p1", view=w.pod)
    w.call("patch gate True", k.patch_pod_condition, ns, "p1", uid, {**gate, "status": "True"})
    w.call("get p1 again", k.get_pod, ns, "p1", view=w.pod)
    w.call("patch stale uid", k.patch_pod_condition, ns, "p1", "00000000-0000-0000-0000-000000000000", gate)
    w.call("patch missing", k.patch_pod_condition, ns, "nope", uid, gate)
    w.call("get p1 at the end", k.get_pod, ns, "p1", view=w.pod)


def _config_map(name: str, data: dict[str, str], rv: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, **({"resourceVersion": rv} if rv else {})}, "data": data}


def seq_config_maps(w: Side, p: str) -> None:
    """ConfigMaps (the deletion ledger, the brake): create, create-exists (409), update with the resourceVersion
    read, with a stale one (409), without one, of a missing ConfigMap (404), in a missing namespace (404)."""
    ns = w.make_namespace(f"{p}-a")
    k = w.kube
    w.call("get missing", k.get_config_map, ns, "ledger", view=w.config_map)
    made = w.call("create", k.create_config_map, ns, _config_map("ledger", {"a": "1"}), view=w.config_map)
    w.call("create again", k.create_config_map, ns, _config_map("ledger", {"a": "2"}), view=w.config_map)
    w.call("get", k.get_config_map, ns, "ledger", view=w.config_map)
    rv = made["metadata"]["resourceVersion"] if made else "1"
    w.call("replace with the rv read", k.replace_config_map, ns, "ledger", _config_map("ledger", {"a": "3"}, rv),
           view=w.config_map)
    w.call("replace with that rv again (stale)", k.replace_config_map, ns, "ledger",
           _config_map("ledger", {"a": "4"}, rv), view=w.config_map)
    w.call("get after", k.get_config_map, ns, "ledger", view=w.config_map)
    w.call("replace without rv", k.replace_config_map, ns, "ledger", _config_map("ledger", {"a": "5"}),
           view=w.config_map)
    w.call("replace missing", k.replace_config_map, ns, "other", _config_map("other", {}, rv), view=w.config_map)
    w.call("create in a missing namespace", k.create_config_map, f"{p}-none", _config_map("ledger", {}),
           view=w.config_map)


def _lease(name: str, holder: str, rv: str | None = None, renewed: str = "2026-12-06T00:00:00.000000Z"
           ) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, **({"resourceVersion": rv} if rv else {})},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}}


def seq_leases(w: Side, p: str) -> None:
    """Leader election's Lease, two replicas: both create (one 409), both read; an update that changes nothing
    (no new resourceVersion), a renewal, the other's update with the resourceVersion it read (409); an update of a
    missing Lease (Leases are created on update)."""
    ns = w.make_namespace(f"{p}-a")
    r0, r1 = w.kube, w.other_client()
    w.call("r0 get missing", r0.get_lease, ns, "leader", view=w.lease)
    w.call("r0 create", r0.create_lease, ns, _lease("leader", "r0"), view=w.lease)
    w.call("r1 create (exists)", r1.create_lease, ns, _lease("leader", "r1"), view=w.lease)
    seen0 = w.call("r0 get", r0.get_lease, ns, "leader", view=w.lease)
    seen1 = w.call("r1 get", r1.get_lease, ns, "leader", view=w.lease)
    rv0 = seen0["metadata"]["resourceVersion"] if seen0 else "1"
    rv1 = seen1["metadata"]["resourceVersion"] if seen1 else "1"
    w.call("r0 update changing nothing", r0.replace_lease, ns, "leader", _lease("leader", "r0", rv0), view=w.lease)
    w.call("r0 renew", r0.replace_lease, ns, "leader",
           _lease("leader", "r0", rv0, renewed="2026-12-06T00:00:05.000000Z"), view=w.lease)
    w.call("r1 take over with its stale read", r1.replace_lease, ns, "leader", _lease("leader", "r1", rv1),
           view=w.lease)
    w.call("r1 get", r1.get_lease, ns, "leader", view=w.lease)
    w.call("r1 update a missing lease", r1.replace_lease, ns, "other", _lease("other", "r1", rv1), view=w.lease)
    w.call("r1 get the lease made by update", r1.get_lease, ns, "other", view=w.lease)


def seq_events(w: Side, p: str) -> None:
    """core/v1 Events: a pod's (generated name), a named once-per-pod Event twice (409), a Node's in default and
    elsewhere (422), a pod's Event in another namespace than the pod's (422), in a missing namespace (404)."""
    ns = w.make_namespace(f"{p}-a")
    other = w.make_namespace(f"{p}-b")
    k = w.kube
    uid = w.make_pod(ns, "p1")
    pod = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uid}
    node = {"apiVersion": "v1", "kind": "Node", "name": "cf-node", "uid": "node-uid"}
    w.call("pod Event", k.create_event, ns, event_body(ns, pod, "StalledPodDeleted", "m", "r0", NOW))
    w.call("pod Event again (generated name)", k.create_event, ns,
           event_body(ns, pod, "StalledPodDeleted", "m", "r0", NOW))
    once = event_body(ns, pod, "StalledPodDeferred", "m", "r0", NOW, once=True)
    w.call("named Event", k.create_event, ns, once)
    w.call("named Event again", k.create_event, ns, once)
    w.call("Node Event in default", k.create_event, "default", event_body("default", node, "StalledNodeTainted",
                                                                           "m", "r0", NOW))
    w.call("Node Event elsewhere", k.create_event, ns, event_body(ns, node, "StalledNodeTainted", "m", "r0", NOW))
    stray = event_body(ns, pod, "StalledPodDeleted", "m", "r0", NOW)
    stray["metadata"]["namespace"] = other
    w.call("pod Event in another namespace", k.create_event, other, stray)
    w.call("Event in a missing namespace", k.create_event, f"{p}-none",
           event_body(f"{p}-none", pod, "StalledPodDeleted", "m", "r0", NOW))


def seq_nodes(w: Side, p: str) -> None:
    """Node taints: a merge patch guarded by the resourceVersion read; a stale one (409); the same key and effect
    twice (422); a missing Node (404)."""
    name = f"{p}-node"
    w.make_node(name)
    k = w.kube
    w.call("get missing node", k.get_node, f"{p}-none", view=w.node)
    node = w.call("get node", k.get_node, name, view=w.node)
    rv = node["metadata"]["resourceVersion"] if node else "1"
    taint = {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}
    other = {"key": "someone.else/maintenance", "effect": "NoExecute"}
    w.call("taint with the rv read", k.patch_node_taints, name, [other, taint], rv, view=w.node)
    w.call("taint with that rv again (stale)", k.patch_node_taints, name, [taint], rv, view=w.node)
    after = w.call("get node after", k.get_node, name, view=w.node)
    rv = after["metadata"]["resourceVersion"] if after else "1"
    w.call("the same taint twice", k.patch_node_taints, name, [other, taint, taint], rv, view=w.node)
    w.call("taint a missing node", k.patch_node_taints, f"{p}-none", [taint], rv, view=w.node)


def seq_owners(w: Side, p: str) -> None:
    """The owner walk's GET: a ReplicaSet, a missing one, a missing Deployment, a kind that is not an owner kind
    and a name that is not a name (ValueError, nothing sent)."""
    ns = w.make_namespace(f"{p}-a")
    k = w.kube
    w.make_replica_set(ns, "rs1")
    w.call("get ReplicaSet", k.get_object, "apps/v1", "ReplicaSet", ns, "rs1", view=w.owner)
    w.call("get missing ReplicaSet", k.get_object, "apps/v1", "ReplicaSet", ns, "rs2", view=w.owner)
    w.call("get missing Deployment", k.get_object, "apps/v1", "Deployment", ns, "d1", view=w.owner)
    w.call("get a Node as an owner", k.get_object, "v1", "Node", ns, "cf-node", view=w.owner)
    w.call("get a path as a name", k.get_object, "apps/v1", "ReplicaSet", ns, "../../nodes/x", view=w.owner)


def seq_lists(w: Side, p: str) -> None:
    """Label-selector LISTs of namespaces and pods (all namespaces and per namespace), set-based selectors, a
    malformed selector (400)."""
    a = w.make_namespace(f"{p}-a", {"vllm-watchdog.io/enabled": "true", "tenant": "t1"})
    b = w.make_namespace(f"{p}-b", {"vllm-watchdog.io/enabled": "dry-run", "tenant": "t2"})
    w.make_namespace(f"{p}-c", {"tenant": "t2"})
    k = w.kube
    w.make_pod(a, "v1")
    w.make_pod(a, "s1", labels={"app.kubernetes.io/name": "sglang"})
    w.make_pod(b, "v2")
    w.make_pod(b, "bare", labels={})
    w.settle()
    for selector in ("vllm-watchdog.io/enabled in (true,dry-run)", "vllm-watchdog.io/enabled=true", "tenant!=t1",
                     "!vllm-watchdog.io/enabled", "tenant", "tenant notin (t2)", ""):
        w.call(f"namespaces {selector!r}", k.list_namespaces, selector, view=w.namespaces)
    for selector in (SELECTOR, "app.kubernetes.io/name in (vllm,sglang)", "!app.kubernetes.io/name",
                     "app.kubernetes.io/name", "app.kubernetes.io/name in ()"):
        w.call(f"pods {selector!r}", k.list_pods, selector, view=w.pods)
        w.call(f"pods {selector!r} in b", k.list_pods, selector, (b,), view=w.pods)
    w.call("pods in a missing namespace", k.list_pods, SELECTOR, (f"{p}-none",), view=w.pods)
    for selector in ("a b", "a=(b", "in (x)", "a in x"):
        w.call(f"pods malformed {selector!r}", k.list_pods, selector, view=w.pods)
        w.call(f"namespaces malformed {selector!r}", k.list_namespaces, selector, view=w.namespaces)


def seq_rbac(w: Side, p: str) -> None:
    """Namespace-only RBAC (identity ``narrow``): a RoleBinding in ``a`` only: every namespaced call in ``b`` is
    refused (403), in ``a`` answered; the RoleBinding moved from ``a`` to ``b``: the other way round. Cluster-scoped
    reads (namespaces) are answered throughout."""
    a = w.make_namespace(f"{p}-a", {"tenant": "t1"})
    b = w.make_namespace(f"{p}-b", {"tenant": "t2"})
    k = w.kube
    uids = {ns: w.make_pod(ns, "p1") for ns in (a, b)}
    w.make_replica_set(b, "rs1")
    w.grant(a)

    def every_call(tag: str) -> None:
        w.settle()
        w.call(f"{tag}: namespaces", k.list_namespaces, "tenant", view=w.namespaces)
        w.call(f"{tag}: get namespace b", k.get_namespace, b, view=w.namespace)
        for ns in (a, b):
            w.call(f"{tag}: list pods in {ns}", k.list_pods, SELECTOR, (ns,), view=w.pods)
            w.call(f"{tag}: get pod in {ns}", k.get_pod, ns, "p1", view=w.pod)
            w.call(f"{tag}: get configmap in {ns}", k.get_config_map, ns, "ledger", view=w.config_map)
            w.call(f"{tag}: get owner in {ns}", k.get_object, "apps/v1", "ReplicaSet", ns, "rs1", view=w.owner)
            w.call(f"{tag}: event in {ns}", k.create_event, ns, event_body(
                ns, {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uids[ns]}, "StalledPodDeleted", "m",
                "r0", NOW))
            w.call(f"{tag}: patch status in {ns}", k.patch_pod_condition, ns, "p1", uids[ns],
                   {"type": GATE_CONDITION, "status": "True"})
            w.call(f"{tag}: evict stale uid in {ns}", k.evict_pod, ns, "p1", "00000000-0000-0000-0000-000000000000",
                   None)
            w.call(f"{tag}: delete stale uid in {ns}", k.delete_pod, ns, "p1", "00000000-0000-0000-0000-000000000000",
                   None)
    every_call("bound in a")
    w.revoke(a)
    w.grant(b)
    every_call("bound in b")


def seq_rbac_mixed(w: Side, p: str) -> None:
    """The RBAC shape the sim's ``rbac_removed`` stands for in cluster-wide mode (identity ``mixed``): pods listed
    cluster-wide (a ClusterRoleBinding), everything else per namespace (a RoleBinding in ``a`` only): the LIST of
    every namespace is answered, with ``b``'s pods; a read or write in ``b`` is refused (403). (The chart's own
    cluster-wide rules cannot lose one namespace: RBAC only adds.)"""
    a = w.make_namespace(f"{p}-a")
    b = w.make_namespace(f"{p}-b")
    k = w.kube
    uids = {ns: w.make_pod(ns, "p1") for ns in (a, b)}
    w.grant(a)
    w.settle()
    w.call("pods of every namespace", k.list_pods, SELECTOR, view=w.pods)
    for ns in (a, b):
        w.call(f"get pod in {ns}", k.get_pod, ns, "p1", view=w.pod)
        w.call(f"delete stale uid in {ns}", k.delete_pod, ns, "p1", "00000000-0000-0000-0000-000000000000", None)
        w.call(f"event in {ns}", k.create_event, ns, event_body(
            ns, {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uids[ns]}, "StalledPodDeleted", "m", "r0",
            NOW))


def seq_namespace_deleted(w: Side, p: str) -> None:
    """A namespace deleted: while Terminating, creates (Events, evictions, ConfigMaps) are refused (403), deletes,
    reads and pods/status patches pass, LISTs still show it and its pods; once gone: 404s (None, not_found) and an
    empty LIST."""
    ns = w.make_namespace(f"{p}-a", {"vllm-watchdog.io/enabled": "true"})
    k = w.kube
    uid = w.make_pod(ns, "p1")
    uid2 = w.make_pod(ns, "p2")
    involved = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uid}

    def reads(phase: str) -> None:  # the namespace and its pods, by name and in the LISTs
        w.call(f"{phase}: get namespace", k.get_namespace, ns, view=w.namespace)
        w.call(f"{phase}: namespaces", k.list_namespaces, "vllm-watchdog.io/enabled", view=w.namespaces)
        w.call(f"{phase}: pods", k.list_pods, SELECTOR, view=w.pods)
        w.call(f"{phase}: pods in it", k.list_pods, SELECTOR, (ns,), view=w.pods)
    w.terminate_namespace(ns)
    w.settle()
    reads("Terminating")
    w.call("Terminating: event", k.create_event, ns, event_body(ns, involved, "StalledPodDeleted", "m", "r0", NOW))
    w.call("Terminating: evict p2", k.evict_pod, ns, "p2", uid2, None)
    w.call("Terminating: create configmap", k.create_config_map, ns, _config_map("ledger", {}), view=w.config_map)
    w.call("Terminating: patch status", k.patch_pod_condition, ns, "p1", uid, {"type": GATE_CONDITION,
                                                                             "status": "False"})
    w.call("Terminating: delete p1", k.delete_pod, ns, "p1", uid, None)
    w.call("Terminating: get p1", k.get_pod, ns, "p1", view=w.pod)
    w.finish_namespace(ns)
    w.settle()
    reads("gone")
    w.call("gone: get p1", k.get_pod, ns, "p1", view=w.pod)
    w.call("gone: delete p1", k.delete_pod, ns, "p1", uid, None)
    w.call("gone: evict p1", k.evict_pod, ns, "p1", uid, None)
    w.call("gone: patch status", k.patch_pod_condition, ns, "p1", uid, {"type": GATE_CONDITION, "status": "False"})
    w.call("gone: event", k.create_event, ns, event_body(ns, involved, "StalledPodDeleted", "m", "r0", NOW))
    w.call("gone: get configmap", k.get_config_map, ns, "ledger", view=w.config_map)


def seq_namespace_deleted_narrow(w: Side, p: str) -> None:
    """A namespace deleted under namespace-only RBAC: while its pods terminate, the namespace controller deletes
    nothing else, so its RoleBinding still holds (reads, deletes answered; creates 403 by the NamespaceLifecycle
    admission); once it is gone, the RoleBinding is gone with it: 403, not 404."""
    ns = w.make_namespace(f"{p}-a", {"vllm-watchdog.io/enabled": "true"})
    k = w.kube
    uid = w.make_pod(ns, "p1")
    w.grant(ns)
    involved = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uid}
    w.terminate_namespace(ns)
    w.settle()
    w.call("Terminating: get namespace", k.get_namespace, ns, view=w.namespace)
    w.call("Terminating: pods in it", k.list_pods, SELECTOR, (ns,), view=w.pods)
    w.call("Terminating: get p1", k.get_pod, ns, "p1", view=w.pod)
    w.call("Terminating: delete p1", k.delete_pod, ns, "p1", uid, None)
    w.call("Terminating: event", k.create_event, ns, event_body(ns, involved, "StalledPodDeleted", "m", "r0", NOW))
    w.finish_namespace(ns)
    w.call("gone: get namespace", k.get_namespace, ns, view=w.namespace)
    w.call("gone: pods in it", k.list_pods, SELECTOR, (ns,), view=w.pods)
    w.call("gone: get p1", k.get_pod, ns, "p1", view=w.pod)
    w.call("gone: delete p1", k.delete_pod, ns, "p1", uid, None)
    w.call("gone: event", k.create_event, ns, event_body(ns, involved, "StalledPodDeleted", "m", "r0", NOW))


#: (sequence, identity): ``wide`` is the chart's cluster-wide rules, ``narrow`` namespace-only RBAC, ``mixed`` pods
#: listed cluster-wide and the rest per namespace.
SEQUENCES: list[tuple[Callable[[Side, str], None], str]] = [
    (seq_delete, "wide"), (seq_evict, "wide"), (seq_pod_status, "wide"), (seq_config_maps, "wide"),
    (seq_leases, "wide"), (seq_events, "wide"), (seq_nodes, "wide"), (seq_owners, "wide"), (seq_lists, "wide"),
    (seq_rbac, "narrow"), (seq_rbac_mixed, "mixed"), (seq_namespace_deleted, "wide"),
    (seq_namespace_deleted_narrow, "narrow"),
]


# -- fixtures ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clients(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, KubeClient]]:
    """A ServiceAccount per identity (:data:`IDENTITIES`) with its ClusterRoleBindings, and two KubeClients each
    (two replicas)."""
    api = control_plane.api
    assert api is not None
    work = tmp_path_factory.mktemp("conformance")
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NS}})
    roles = {"cf-namespaced": NAMESPACED_RULES, "cf-cluster": CLUSTER_RULES, "cf-list": LIST_RULES}
    for name, rules in roles.items():
        api.create(f"{rbac}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                            "metadata": {"name": name}, "rules": rules})
    bindings = [(identity, role) for identity, bound in IDENTITIES.items() for role in bound]
    out: dict[str, KubeClient] = {}
    for identity in IDENTITIES:
        api.create(f"/api/v1/namespaces/{SYSTEM_NS}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"cf-{identity}"}})
    for i, (identity, role) in enumerate(bindings):
        api.create(f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"cf-{i}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": f"cf-{identity}", "namespace": SYSTEM_NS}]})
    for identity in IDENTITIES:
        token = api.create(f"/api/v1/namespaces/{SYSTEM_NS}/serviceaccounts/cf-{identity}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}})["status"]["token"]
        path = control_plane.write_kubeconfig(work / f"{identity}.kubeconfig", token, identity)
        for suffix in ("", "-2"):
            out[identity + suffix] = KubeClient.from_settings(KubeSettings(kubeconfig=str(path),
                                                                           request_timeout_s=10))
    try:
        yield out
    finally:
        for i in range(len(bindings)):
            api.delete(f"{rbac}/clusterrolebindings/cf-{i}")
        for name in roles:
            api.delete(f"{rbac}/clusterroles/{name}")
        api.delete(f"/api/v1/namespaces/{SYSTEM_NS}", ok=(404, 409))


_RUN = f"{int(time.time()) % 100000:05d}"


def _compare(sim: Side, real: Side) -> list[str]:
    diffs = []
    for (label, mine), (_, theirs) in itertools.zip_longest(sim.answers, real.answers, fillvalue=("?", "<none>")):
        if mine != theirs:
            diffs.append(f"{label}:\n    sim:  {mine!r}\n    real: {theirs!r}")
    return diffs


@pytest.mark.parametrize(("sequence", "identity"), SEQUENCES, ids=[s.__name__.removeprefix("seq_") for s, _ in
                                                                  SEQUENCES])
def test_sim_api_answers_as_the_real_api_server(sequence: Callable[[Side, str], None], identity: str,
                                               control_plane: ControlPlane, clients: dict[str, KubeClient]) -> None:
    prefix = f"cf{_RUN}-{SEQUENCES.index((sequence, identity))}"
    if control_plane.api is not None and control_plane.api.find("/api/v1/nodes/cf-node") is None:
        control_plane.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                   "metadata": {"name": "cf-node"}})
    real = RealSide(prefix, identity, control_plane, clients)
    sim = SimSide(prefix, identity)
    try:
        sequence(real, prefix)
    finally:
        real.cleanup()
        if sequence is seq_nodes:
            control_plane.api.delete(f"/api/v1/nodes/{prefix}-node")  # type: ignore[union-attr]
    sequence(sim, prefix)
    assert len(real.answers) == len(sim.answers) > 0
    diffs = _compare(sim, real)
    assert not diffs, f"{len(diffs)} of {len(real.answers)} answers differ:\n" + "\n".join(diffs)


def test_every_sim_fault_is_replayed_or_said_why_not() -> None:
    """A fault added to the sim must be replayed here or listed in NOT_REPLAYED with the reason."""
    assert set(NOT_REPLAYED) == {*WRITE_FAULTS, *READ_FAULTS, *LIST_FAULTS}
