"""The simulation's in-memory Kubernetes API: one :class:`Store` (what the API server holds) and one
:class:`SimKube` per watchdog replica (the ``Cluster`` port the composition root hands out, plus the Lease calls
leader election makes), answering as ``watchdog.adapters.kube.KubeClient`` does: the same result values (404 ->
None / "not_found", 409 -> "conflict", 429 on an eviction -> "blocked", the several-PDBs 500 -> "several_pdbs")
and :class:`KubeError` with the status otherwise.

Every call asks the seed's :class:`Faults` first: a fault may lose the answer of a write it applied, fail it with
a 5xx or a timeout without applying it, throttle it (429), serve a stale LIST, or kill the process between two
writes (:class:`Crash`, before or after the write was applied). Everything the API server really applied is kept
in :attr:`Store.history` (with the truth time and the replica that sent it): what the oracles judge.

No threads, no sleeps, no I/O: time is :attr:`Store.t`, moved by the world."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from watchdog.adapters.kube import DeleteResult, EvictResult, KubeError, PatchResult
from watchdog.config.selectors import selector_problem
from watchdog.core.owners import owner_path
from watchdog.demo.emulator.selectors import parse_selector, selector_matches

WRITES = ("delete_pod", "evict_pod", "patch_pod_condition", "patch_node_taints", "create_config_map",
          "replace_config_map", "create_event", "create_lease", "replace_lease")
LEASE_CALLS = ("get_lease", "create_lease", "replace_lease")
#: What a fault may do to a write (the answer lost after it was applied, or a failure that applied nothing), to a
#: read, and to a LIST.
WRITE_FAULTS = ("lost", "5xx", "timeout", "429", "crash_before", "crash_after", "pause")
READ_FAULTS = ("5xx", "timeout", "429", "crash_before", "pause")
LIST_FAULTS = (*READ_FAULTS, "stale")


class Crash(BaseException):  # not an error the watchdog may catch: the process is gone
    """The watchdog process was killed at this API call (a BaseException: no ``except Exception`` catches it)."""


@dataclass(frozen=True)
class Write:
    """One write the API server applied: ``t`` (truth seconds), ``replica`` (who sent it), ``verb``, ``key``
    (what it hit), ``detail`` (the facts the oracles need)."""

    t: float
    replica: str
    verb: str
    key: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Faults:
    """The seed's perturbations of API calls: ``schedule`` call index -> fault (a fixed schedule: a replay or a
    shrink), or drawn by ``draw`` (call index, call name, choices) -> fault or None and recorded in ``schedule``.
    ``until``: no fault at or after this truth time (the quiet end of a run); ``taken``: the faults applied."""

    draw: Callable[[int, str, tuple[str, ...]], str | None] | None = None
    schedule: dict[int, str] = field(default_factory=dict)
    until: float = float("inf")
    calls: int = 0
    taken: list[tuple[int, str, str, float]] = field(default_factory=list)  # (index, call, fault, t)
    #: The seed's fault pattern (sim_world.PATTERNS), asked before ``draw``: (call, who sent it, what it names) ->
    #: fault or None. It aims at one rule (a lost DELETE then a crash, a pause inside a removal); drawn, recorded
    #: in ``schedule`` like the rest (a replay needs no pattern).
    pattern: Callable[[str, str, str], str | None] | None = None

    def next(self, call: str, choices: tuple[str, ...], t: float, replica: str = "", name: str = "") -> str | None:
        index, self.calls = self.calls, self.calls + 1
        if t >= self.until:
            return None
        if self.draw is not None:
            fault = self.pattern(call, replica, name) if self.pattern is not None else None
            fault = fault if fault is not None else self.draw(index, call, choices)
            if fault is not None:
                self.schedule[index] = fault
        else:
            fault = self.schedule.get(index)
            if fault is not None and fault.split(":")[0] not in choices:
                fault = None  # a shrunk schedule may move a fault onto a call it cannot apply to
        if fault is not None:
            self.taken.append((index, call, fault, t))
        return fault


def _copy(obj: Any) -> Any:
    """What the API server sends is a copy (the watchdog can never change the store by what it holds)."""
    return pickle.loads(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)) if obj is not None else None


WALL0 = 1_790_000_000.0  # the wall clock at truth time 0 (the API server's; a replica's may be skewed)


class Store:
    """What the API server holds, and what it applied (:attr:`history`). ``t``: truth time (seconds)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.rv = 1
        # every cluster has these (a Node's Events go to "default")
        self.namespaces: dict[str, dict[str, Any]] = {ns: {"metadata": {"name": ns, "uid": f"ns-{ns}", "labels": {
            "kubernetes.io/metadata.name": ns}}} for ns in ("default", "kube-system", "kube-public", "kube-node-lease")}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.owners: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name)
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pdbs: dict[str, list[dict[str, str]]] = {}  # namespace -> selectors (labels) of PDBs allowing none
        self.events: list[tuple[float, str, str, dict[str, Any]]] = []  # (t, replica, namespace, body)
        self.history: list[Write] = []
        self.forbidden: set[str] = set()  # namespaces where the watchdog's RBAC was removed (403)
        self.stale: list[tuple[dict[str, Any], dict[str, Any]]] = []  # earlier (namespaces, pods) views
        self.lease_renewed: dict[str, float] = {}  # holder identity -> truth time of its last Lease write
        self.failed_events: set[str] = set()  # pod UIDs an Event about which was lost or refused
        self.hook: Callable[[str, str, float | None], None] | None = None  # a "pause" (replica, call, seconds)

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def remember_view(self, keep: int = 3) -> None:
        """Keep the current namespaces and pods as a possible stale LIST answer later."""
        self.stale.append((_copy(self.namespaces), _copy(self.pods)))
        del self.stale[:-keep]

    def record(self, replica: str, verb: str, key: str, **detail: Any) -> None:
        """One applied write, with the Lease as it stood (its holder and when that holder last wrote it)."""
        lease = next(iter(self.leases.values()), None)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        detail.update(holder=holder, renewed=self.lease_renewed.get(str(holder)))
        self.history.append(Write(self.t, replica, verb, key, detail))


def _error(call: str, status: int, reason: str, message: str = "") -> KubeError:
    return KubeError(call, status, reason, message)


def _gone(pod: dict[str, Any] | None) -> bool:
    """Deleted with a grace period of 0: the API server removed it at once (the world's kubelet tidies up later)."""
    return pod is None or pod["metadata"].get("deletionGracePeriodSeconds") == 0


def _selector(call: str, label_selector: str) -> Any:
    """The parsed selector; a malformed one is the API server's 400 (which accepts an empty value list, ``in ()``,
    matching nothing, where the watchdog's own check refuses it)."""
    problem = selector_problem(re.sub(r"\(\s*\)", "(x)", label_selector))
    if problem is not None:
        raise _error(call, 400, "Bad Request", f"unable to parse requirement: {problem}")
    return parse_selector(label_selector)


class SimKube:
    """The API as replica ``replica`` reaches it (the ``Cluster`` port, plus the Lease calls)."""

    def __init__(self, store: Store, replica: str, faults: Faults) -> None:
        self.store, self.replica, self.faults = store, replica, faults
        self._count = 0

    @property
    def api_requests(self) -> int:
        return self._count

    def server_time(self) -> float | None:
        """The API server's clock (truth time on the wall): what its answers' Date header tells a replica."""
        return WALL0 + self.store.t

    # -- the fault gate ---------------------------------------------------------------------------------------
    def _gate(self, call: str, choices: tuple[str, ...], namespace: str | None = None, name: str = "") -> str | None:
        """Count the call, apply a fault that acts before the server (raise), return one that acts after it.
        ``pause`` freezes the process here for the world's usual time, ``pause:SECONDS`` for that long."""
        self._count += 1
        fault = self.faults.next(call, choices, self.store.t, self.replica, name)
        if fault is not None and fault.startswith("pause"):
            if self.store.hook is not None:  # the process froze here: time passes, the others act
                self.store.hook(self.replica, call, float(fault[6:]) if fault.startswith("pause:") else None)
            fault = None
        if fault == "crash_before":
            raise Crash(f"{self.replica} killed before {call}")
        if fault == "5xx":
            raise _error(call, 503, "Service Unavailable")
        if fault == "timeout":
            raise _error(call, 0, "ReadTimeoutError: timed out")
        if fault == "429":
            raise _error(call, 429, "Too Many Requests")
        if namespace is not None and namespace in self.store.forbidden:
            raise _error(call, 403, "Forbidden", f"cannot {call} in the namespace {namespace}")
        return fault

    def _after(self, call: str, fault: str | None) -> None:
        """A write was applied: lose its answer, or kill the process before it returns."""
        if fault == "lost":
            raise _error(call, 0, "ReadTimeoutError: timed out")
        if fault == "crash_after":
            raise Crash(f"{self.replica} killed after {call} was applied")

    # -- reads ------------------------------------------------------------------------------------------------
    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]:
        fault = self._gate("list_namespaces", LIST_FAULTS)
        namespaces = self.store.stale[0][0] if fault == "stale" and self.store.stale else self.store.namespaces
        wanted = _selector("list namespaces", label_selector)
        return [_copy(ns) for ns in namespaces.values() if selector_matches(wanted, ns["metadata"].get("labels"))]

    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        fault = self._gate("list_pods", LIST_FAULTS)
        for ns in namespaces or ():
            if ns in self.store.forbidden:  # namespace-only mode: one LIST per namespace, this one refused
                raise _error("list pods", 403, "Forbidden", f"cannot list pods in the namespace {ns}")
        pods = self.store.stale[0][1] if fault == "stale" and self.store.stale else self.store.pods
        wanted = _selector("list pods", label_selector)
        return [_copy(p) for (ns, _), p in pods.items() if (namespaces is None or ns in namespaces)
                and not _gone(p) and selector_matches(wanted, p["metadata"].get("labels"))]

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._gate("get_pod", READ_FAULTS, namespace)
        pod = self.store.pods.get((namespace, name))
        return None if _gone(pod) else _copy(pod)

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        self._gate("get_namespace", READ_FAULTS)
        return _copy(self.store.namespaces.get(name))

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if owner_path(api_version, kind, namespace, name) is None:  # as KubeClient: nothing is sent
            raise ValueError(f"not a known owner kind or not a valid name: {api_version!r} {kind!r}")
        self._gate("get_object", READ_FAULTS, namespace)
        return _copy(self.store.owners.get((kind, namespace, name)))

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._gate("get_config_map", READ_FAULTS, namespace, name)
        return _copy(self.store.config_maps.get((namespace, name)))

    def get_node(self, name: str) -> dict[str, Any] | None:
        self._gate("get_node", READ_FAULTS)
        return _copy(self.store.nodes.get(name))

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._gate("get_lease", READ_FAULTS, namespace)
        return _copy(self.store.leases.get((namespace, name)))

    def read_pod_log(self, namespace: str, name: str, container: str, lines: int, limit_bytes: int) -> bytes:
        self._gate("read_pod_log", READ_FAULTS, namespace)
        if _gone(self.store.pods.get((namespace, name))):
            raise _error("read log", 404, "Not Found")
        return b"engine log line\n"[:limit_bytes]

    # -- pod writes -------------------------------------------------------------------------------------------
    def _pod_for_write(self, call: str, namespace: str, name: str, uid: str) -> dict[str, Any] | str:
        pod = self.store.pods.get((namespace, name))
        if pod is None or _gone(pod):
            return "not_found"
        if pod["metadata"]["uid"] != uid:
            return "conflict"
        return pod

    def _admit_create(self, call: str, namespace: str) -> None:
        """The NamespaceLifecycle admission: no create in a missing (404) or Terminating (403) namespace."""
        ns = self.store.namespaces.get(namespace)
        if ns is None:
            raise _error(call, 404, "Not Found", f'namespaces "{namespace}" not found')
        if ns["metadata"].get("deletionTimestamp"):
            raise _error(call, 403, "Forbidden", f"unable to create new content in namespace {namespace} because "
                         "it is being terminated")

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> DeleteResult:
        fault = self._gate("delete_pod", WRITE_FAULTS, namespace, name)
        pod = self._pod_for_write("delete pod", namespace, name, uid)
        if isinstance(pod, str):
            return "not_found" if pod == "not_found" else "conflict"
        self._terminate(pod, "delete", grace_period_s)
        self._after("delete_pod", fault)
        return "deleted"

    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> EvictResult:
        fault = self._gate("evict_pod", WRITE_FAULTS, namespace, name)
        pod = self.store.pods.get((namespace, name))
        if _gone(pod) or namespace not in self.store.namespaces:
            return "not_found"
        self._admit_create("evict pod", namespace)  # a Terminating namespace: 403
        assert pod is not None
        # The PDBs are checked before the UID precondition (a stale UID is refused only once they allow it), and
        # not at all for a pod that is Terminating, Pending or finished.
        labels = pod["metadata"].get("labels") or {}
        covering = [s for s in self.store.pdbs.get(namespace, []) if all(labels.get(k) == v for k, v in s.items())]
        if len(covering) > 1:
            return "several_pdbs"
        ignored = pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in (
            "Pending", "Succeeded", "Failed")
        if covering and not ignored:
            return "blocked"
        if pod["metadata"]["uid"] != uid:
            return "conflict"
        if not pod["metadata"].get("deletionTimestamp"):
            conditions = [c for c in pod["status"].get("conditions", []) if c.get("type") != "DisruptionTarget"]
            pod["status"]["conditions"] = [*conditions, {"type": "DisruptionTarget", "status": "True",
                                                         "reason": "EvictionByEvictionAPI"}]
        self._terminate(pod, "evict", grace_period_s)
        self._after("evict_pod", fault)
        return "evicted"

    def _terminate(self, pod: dict[str, Any], verb: str, grace_period_s: int | None) -> None:
        meta = pod["metadata"]
        grace = grace_period_s if grace_period_s is not None else int(pod["spec"].get("terminationGracePeriodSeconds",
                                                                                       30))
        if meta.get("deletionTimestamp"):  # already terminating: the API answers 200; a shorter grace period counts
            before = meta.get("deletionGracePeriodSeconds")
            if grace_period_s is not None and before is not None and grace_period_s < before:
                meta["deletionGracePeriodSeconds"] = grace_period_s
                pod["_gone_at"] = pod.get("_gone_at", self.store.t) - before + grace_period_s
            return
        meta["deletionTimestamp"] = f"t={self.store.t:.3f}"
        meta["deletionGracePeriodSeconds"] = grace
        meta["resourceVersion"] = self.store.next_rv()
        pod["_gone_at"] = self.store.t + grace
        ledger = {k: v for k, v in self.store.config_maps.items() if k[1].endswith("-ledger")}
        self.store.record(self.replica, "remove", meta["uid"], action=verb, namespace=meta["namespace"],
                          name=meta["name"], owner=_owner_name(pod), node=pod["spec"].get("nodeName"),
                          ledger=[json.dumps(cm.get("data") or {}, sort_keys=True) for cm in ledger.values()])

    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, Any]) -> PatchResult:
        fault = self._gate("patch_pod_condition", WRITE_FAULTS, namespace)
        pod = self._pod_for_write("patch pod status", namespace, name, uid)
        if isinstance(pod, str):
            return pod  # type: ignore[return-value]  # "not_found" or "conflict"
        conditions = [c for c in pod["status"].get("conditions", []) if c.get("type") != condition.get("type")]
        pod["status"]["conditions"] = [*conditions, _copy(condition)]
        pod["metadata"]["resourceVersion"] = self.store.next_rv()
        self.store.record(self.replica, "gate", uid, namespace=namespace, condition=_copy(condition))
        self._after("patch_pod_condition", fault)
        return "patched"

    def patch_node_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        fault = self._gate("patch_node_taints", WRITE_FAULTS)
        node = self.store.nodes.get(name)
        if node is None:
            raise _error("patch node", 404, "Not Found")
        if node["metadata"]["resourceVersion"] != resource_version:
            raise _error("patch node", 409, "Conflict")
        if len({(t.get("key"), t.get("effect")) for t in taints}) < len(taints):
            raise _error("patch node", 422, "Unprocessable Entity", "spec.taints: Duplicate value")
        node["spec"]["taints"] = _copy(taints)
        node["metadata"]["resourceVersion"] = self.store.next_rv()
        self.store.record(self.replica, "taint", name, taints=_copy(taints))
        self._after("patch_node_taints", fault)
        return _copy(node)

    # -- ConfigMaps, Leases, Events ---------------------------------------------------------------------------
    def _create(self, call: str, table: dict[tuple[str, str], dict[str, Any]], namespace: str,
                body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        fault = self._gate(call, WRITE_FAULTS, namespace, name)
        self._admit_create(call, namespace)
        if (namespace, name) in table:
            raise _error(call, 409, "AlreadyExists")
        return self._store(call, table, namespace, name, body, fault)

    def _replace(self, call: str, table: dict[tuple[str, str], dict[str, Any]], namespace: str, name: str,
                 body: dict[str, Any]) -> dict[str, Any]:
        fault = self._gate(call, WRITE_FAULTS, namespace, name)
        stored = table.get((namespace, name))
        if stored is None and call.endswith("lease"):  # a Lease is created by an update (a ConfigMap is not)
            self._admit_create(call, namespace)
        elif stored is None:
            raise _error(call, 404, "Not Found")
        else:
            read = body["metadata"].get("resourceVersion")
            if read and read != stored["metadata"]["resourceVersion"]:  # no resourceVersion: unconditional
                raise _error(call, 409, "Conflict", "the object has been modified")
            if _content(body) == _content(stored):  # nothing changed: nothing written, same resourceVersion
                self._after(call, fault)
                return _copy(stored)
        return self._store(call, table, namespace, name, body, fault)

    def _store(self, call: str, table: dict[tuple[str, str], dict[str, Any]], namespace: str, name: str,
               body: dict[str, Any], fault: str | None) -> dict[str, Any]:
        obj = _copy(body)
        obj["metadata"].update(namespace=namespace, name=name, resourceVersion=self.store.next_rv())
        table[(namespace, name)] = obj
        if call.endswith("lease"):
            holder = (obj.get("spec") or {}).get("holderIdentity")
            if holder:
                self.store.lease_renewed[holder] = self.store.t
            self.store.record(self.replica, "lease", f"{namespace}/{name}", holder=holder)
        else:
            self.store.record(self.replica, "configmap", f"{namespace}/{name}", data=_copy(obj.get("data") or {}))
        self._after(call, fault)
        return _copy(obj)

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._create("create_config_map", self.store.config_maps, namespace, body)

    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._replace("replace_config_map", self.store.config_maps, namespace, name, body)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._create("create_lease", self.store.leases, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._replace("replace_lease", self.store.leases, namespace, name, body)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        involved = body.get("involvedObject") or {}
        try:
            fault = self._gate("create_event", WRITE_FAULTS, namespace)
        except KubeError:
            self.store.failed_events.add(str(involved.get("uid")))
            raise
        try:
            self._admit_create("create event", namespace)
            self._valid_event(namespace, body)
        except KubeError as refused:
            if refused.status != 409:  # 409: that named Event exists already (written before): not a failure
                self.store.failed_events.add(str(involved.get("uid")))
            raise
        self.store.events.append((self.store.t, self.replica, namespace, _copy(body)))
        self.store.record(self.replica, "event", str(involved.get("uid")), namespace=namespace,
                          reason=body.get("reason"), kind=involved.get("kind"), message=str(body.get("message")))
        if fault == "lost":
            self.store.failed_events.add(str(involved.get("uid")))
        self._after("create_event", fault)

    def _valid_event(self, namespace: str, body: dict[str, Any]) -> None:
        """The API server's checks of a core/v1 Event: about a cluster-scoped object (a Node) only in "default",
        else in its object's namespace (422); a named Event that exists already (409)."""
        where = (body.get("involvedObject") or {}).get("namespace") or ""
        if where != namespace and (where or namespace != "default"):
            raise _error("create event", 422, "Unprocessable Entity", "involvedObject.namespace: does not match "
                         "event.namespace")
        name = (body.get("metadata") or {}).get("name")
        if name and any(ns == namespace and (ev.get("metadata") or {}).get("name") == name
                        for _, _, ns, ev in self.store.events):
            raise _error("create event", 409, "AlreadyExists", f'events "{name}" already exists')


def _content(obj: dict[str, Any]) -> Any:
    """What an update compares to decide whether it changes anything (not the resourceVersion or the name)."""
    meta = obj.get("metadata") or {}
    return ({k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")},
            meta.get("labels") or {}, meta.get("annotations") or {})


def _owner_name(pod: dict[str, Any]) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None
