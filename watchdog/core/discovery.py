"""Discovery: Kubernetes objects (plain API dicts) -> the scrape targets of one cycle. Pure: no I/O.

A pod is a target when all of these hold (each refusal is counted under a skip reason):

- its namespace carries the label ``vllm-watchdog.io/enabled`` with value ``true`` (enforce) or ``dry-run``
  (observe only); any other value or no label: ignored. ``kube-system`` is never watched, nor a namespace being
  deleted (Terminating: its pods go anyway, and the API server refuses Events there);
- it matched one of the configured targets' label selectors; matched by several, it is judged by the one
  :func:`watchdog.core.podpolicy.resolve_target` picks (the longest window), and not at all when their engine
  profiles differ (``targets_conflict``); every such overlap that makes a difference is listed in
  :attr:`Discovery.overlaps`;
- phase ``Running``, ``status.podIP`` set to an ordinary unicast address (:mod:`watchdog.core.addresses`:
  loopback, link-local, every known cloud metadata address, unspecified, multicast, broadcast, reserved and
  IPv4-in-IPv6 forms are refused; loopback only with ``allow_loopback``, for the demo and tests), not
  terminating, not ``hostNetwork``;
- Ready now, or seen Ready before by this process (a pod still loading its model is not judged), or, for a pod
  that declares the quarantine readiness gate (:data:`~watchdog.core.model.GATE_CONDITION`), its containers
  ready: such a pod is not Ready before the watchdog admits it;
- not opted out by the annotation ``vllm-watchdog.io/exclude: "true"``;
- it has a controller owner reference, unless ``require_controller`` is off.

Port: the annotation ``vllm-watchdog.io/metrics-port`` (a name or number) may choose only among the pod's
declared container ports, otherwise the pod is refused; without it, the target's port (a container port name,
``http`` by default, or a number) and, when no container port has that name, the profile's default port. The
host is always the pod's own ``status.podIP``; the path is the target's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.addresses import is_scrapable
from watchdog.core.model import (
    EXCLUDE_ANNOTATION,
    GATE_CONDITION,
    NAMESPACE_LABEL,
    NEVER_WATCHED_NAMESPACES,
    OPT_IN_VALUES,
    PAUSE_ANNOTATION,
    PORT_ANNOTATION,
    WINDOW_ANNOTATION,
    OwnerRef,
    Target,
    WatchedPod,
    annotation,
)
from watchdog.core.podpolicy import EffectivePolicy, Resolution, resolve_target
from watchdog.core.profiles import get_profile
from watchdog.core.vocab import NamespaceMode

__all__ = ["Discovery", "Overlap", "OwnerRef", "WatchedPod", "controller_of", "discover", "has_gate", "invalid_opt_ins",
           "namespace_modes", "tenant_of"]


@dataclass
class Discovery:
    """The result of one discovery: targets, pods seen Ready, and how many pods were skipped for what."""

    targets: list[WatchedPod]
    ready_uids: set[str]
    skipped: Counter[str]
    modes: dict[str, NamespaceMode] = field(default_factory=dict)  # opted-in namespace -> mode
    overlaps: list[Overlap] = field(default_factory=list)  # watched (or conflicting) pods several targets match


@dataclass(frozen=True, slots=True)
class Overlap:
    """A pod that discovery would watch, matched by several targets that differ: which ones (configuration order),
    the one judging it (None: their profiles conflict, not judged) and the line saying so."""

    uid: str
    namespace: str
    name: str
    targets: tuple[str, ...]
    chosen: str | None
    note: str


def invalid_opt_ins(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Namespace name -> label value, for namespaces whose opt-in label has a value that means nothing."""
    out = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        value = (meta.get("labels") or {}).get(NAMESPACE_LABEL)
        if value is not None and value not in OPT_IN_VALUES and meta.get("name"):
            out[str(meta["name"])] = str(value)
    return out


def terminating(namespace: Mapping[str, Any]) -> bool:
    """The namespace is being deleted: the namespace controller removes its pods anyway, and the API server
    refuses every create there (Events, evictions) with 403. Its pods are never acted on."""
    meta = namespace.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) or (namespace.get("status") or {}).get("phase") == "Terminating"


def namespace_modes(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, NamespaceMode]:
    """Namespace name -> mode, for namespaces that opted in with a valid label value (and are not being
    deleted)."""
    modes: dict[str, NamespaceMode] = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        name = meta.get("name")
        value = (meta.get("labels") or {}).get(NAMESPACE_LABEL)
        if not name or name in NEVER_WATCHED_NAMESPACES or terminating(ns):
            continue
        mode = OPT_IN_VALUES.get(str(value))
        if mode is not None:
            modes[name] = mode
    return modes


def tenant_of(namespace: Mapping[str, Any], label: str) -> str:
    """The tenant of a Namespace object: ``label=value`` when ``label`` (the ``tenantLabel`` setting) is set and the
    namespace carries it with a non-empty value, else the namespace's own name (each namespace its own tenant). The
    two forms never collide: a namespace name holds no ``=``. The label must be one tenants cannot write on their
    own namespaces (docs/tenancy.md)."""
    meta = namespace.get("metadata") or {}
    value = (meta.get("labels") or {}).get(label) if label else None
    return f"{label}={value}" if value else str(meta.get("name"))


def controller_of(meta: Mapping[str, Any]) -> OwnerRef | None:
    """The owner reference marked ``controller: true`` in ``metadata.ownerReferences``, if any."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") and ref.get("name"):
            return OwnerRef(str(ref.get("apiVersion", "")), str(ref["kind"]), str(ref["name"]), str(ref.get("uid", "")))
    return None


def condition(status: Mapping[str, Any], kind: str) -> str | None:
    """The ``status`` ("True", "False", ...) of the pod condition of type ``kind``, or None when absent."""
    for c in status.get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def _is_ready(status: Mapping[str, Any]) -> bool:
    return condition(status, "Ready") == "True"


def has_gate(pod: Mapping[str, Any]) -> bool:
    """The pod declares the watchdog's readiness gate (:data:`~watchdog.core.model.GATE_CONDITION`)."""
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    return any(isinstance(g, Mapping) and g.get("conditionType") == GATE_CONDITION for g in gates)


def _gated_and_loaded(pod: Mapping[str, Any]) -> bool:
    """The pod declares the readiness gate and its containers are ready (its model is loaded): it is not Ready
    until the watchdog admits it (:mod:`watchdog.core.quarantine`), so it is judged from here on."""
    return has_gate(pod) and condition(pod.get("status") or {}, "ContainersReady") == "True"


def engine_container(pod: Mapping[str, Any], port: int) -> str:
    """The name of the container declaring ``port`` (the engine's), else of the first container ("" if none)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    owner = next((c for c in containers if any(p.get("containerPort") == port for p in c.get("ports") or [])),
                 containers[0])
    return str(owner.get("name") or "")


def declared_ports(pod: Mapping[str, Any]) -> tuple[int, ...]:
    """The ports the pod's containers declare (``containerPort``, sorted, at most 64: the API server's word)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    ports = {p.get("containerPort") for c in containers for p in c.get("ports") or []}
    return tuple(sorted(p for p in ports if isinstance(p, int) and 0 < p < 65536))[:64]


def choose_port(pod: Mapping[str, Any], target: Target) -> int | None:
    """The metrics port for ``pod`` under ``target`` (see module docstring); None when the annotation names a
    port the pod does not declare."""
    containers = (pod.get("spec") or {}).get("containers") or []
    declared = [p for c in containers for p in c.get("ports") or [] if p.get("containerPort")]
    wanted = annotation(pod.get("metadata") or {}, PORT_ANNOTATION)
    if wanted is not None:
        for p in declared:
            if wanted in (p.get("name"), str(p["containerPort"])):
                return int(p["containerPort"])
        return None
    if target.port.isdigit():
        return int(target.port)
    for p in declared:
        if p.get("name") == target.port:
            return int(p["containerPort"])
    return get_profile(target.profile).default_port


def _skip_reason(pod: Mapping[str, Any], mode: NamespaceMode | None, ever_ready: bool, require_controller: bool,
                 allow_loopback: bool) -> str | None:
    """Why discovery skips ``pod`` (the first rule that does, in order), or None when it is watched."""
    if mode is None:
        return "namespace_not_enabled"
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if not meta.get("uid"):
        return "no_uid"
    if annotation(meta, EXCLUDE_ANNOTATION) == "true":
        return "excluded"
    if meta.get("deletionTimestamp"):
        return "terminating"
    if status.get("phase") != "Running":
        return "not_running"
    if (pod.get("spec") or {}).get("hostNetwork"):
        return "host_network"
    if not status.get("podIP"):
        return "no_ip"
    if not is_scrapable(status["podIP"], allow_loopback=allow_loopback):  # the SSRF guard: core/addresses
        return "unsafe_ip"
    if not (ever_ready or _is_ready(status) or _gated_and_loaded(pod)):
        return "never_ready"
    if require_controller and controller_of(meta) is None:
        return "no_controller"
    return None


def discover(
    namespaces: Iterable[Mapping[str, Any]],
    pods_by_target: Iterable[tuple[Target, Iterable[Mapping[str, Any]]]],
    *,
    base: EffectivePolicy,
    ever_ready: frozenset[str] | set[str] = frozenset(),
    require_controller: bool = True,
    allow_loopback: bool = False,
    tenant_label: str = "",
) -> Discovery:
    """Pick this cycle's :class:`WatchedPod` list from namespace and pod dicts (one pod list per target,
    in target order). ``base``: the global stall policy (a pod several targets match goes to the one with the
    longest window: :func:`~watchdog.core.podpolicy.resolve_target`). ``ever_ready``: pod UIDs this process saw
    Ready before. ``allow_loopback``: accept pod IPs in 127.0.0.0/8 and ``::1`` (setting
    ``allow_loopback_pod_ips``: the embedded demo and tests only). ``tenant_label``: the Namespace label naming
    each pod's tenant (:func:`tenant_of`)."""
    namespaces = list(namespaces)
    modes = namespace_modes(namespaces)
    tenants = {str((ns.get("metadata") or {}).get("name")): tenant_of(ns, tenant_label) for ns in namespaces}
    ending = {str((ns.get("metadata") or {}).get("name")) for ns in namespaces if terminating(ns)}
    found = Discovery([], set(), Counter(), modes)
    claimed: dict[object, tuple[Mapping[str, Any], list[Target]]] = {}  # pod UID -> (pod, its matching targets)
    for target, pods in pods_by_target:
        for pod in pods:  # a pod without a UID (skipped below) is keyed by its object
            claimed.setdefault((pod.get("metadata") or {}).get("uid") or id(pod), (pod, []))[1].append(target)
    for pod, matches in claimed.values():
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        uid = str(meta.get("uid") or "")
        if uid and _is_ready(status):
            found.ready_uids.add(uid)
        reason = "namespace_terminating" if str(meta.get("namespace")) in ending else _skip_reason(
            pod, modes.get(str(meta.get("namespace"))), uid in ever_ready, require_controller, allow_loopback)
        if reason is None:
            reason = _take(found, pod, uid, resolve_target(matches, base), tenants[str(meta["namespace"])])
        if reason is not None:
            found.skipped[reason] += 1
    return found


def _take(found: Discovery, pod: Mapping[str, Any], uid: str, resolved: Resolution, tenant: str) -> str | None:
    """Add the pod (which passed every skip rule) under its resolved target (of ``tenant``); or why it is
    skipped."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    names = tuple(t.name for t in resolved.matches)
    target = resolved.target
    if resolved.note:
        found.overlaps.append(Overlap(uid, str(meta["namespace"]), str(meta.get("name")), names,
                                      None if target is None else target.name, resolved.note))
    if target is None:
        return "targets_conflict"
    port = choose_port(pod, target)
    if port is None:
        return "undeclared_port"
    found.targets.append(WatchedPod(
        uid=uid, namespace=str(meta["namespace"]), name=str(meta.get("name")), ip=str(status["podIP"]),
        port=port, path=target.path, target_name=target.name, profile=target.profile,
        mode=found.modes[str(meta["namespace"])], restart_count=_restarts(status), owner=controller_of(meta),
        metrics=target.metrics, created=str(meta.get("creationTimestamp") or ""),
        node=(pod.get("spec") or {}).get("nodeName"), container=engine_container(pod, port),
        window_annotation=annotation(meta, WINDOW_ANNOTATION),
        pause_annotation=annotation(meta, PAUSE_ANNOTATION),
        tenant=tenant, targets=names, ports=declared_ports(pod),
    ))
    return None


def _restarts(status: Mapping[str, Any]) -> int:
    return sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])


def recheck(pod: Mapping[str, Any] | None, namespace: Mapping[str, Any] | None, target: WatchedPod, *,
            require_controller: bool = True) -> str | None:
    """Why the freshly read ``pod`` (and its ``namespace``) is no longer the target the decision was made on,
    or None when it still is. Re-applies every discovery rule that can change at run time — UID, the exclusion
    annotation, the namespace opt-in (a flip to dry-run included), phase, deletion timestamp, hostNetwork, IP,
    controller owner, restart count — so the pre-delete GET honours what an operator just did."""
    if pod is None:
        return "pod is gone"
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("uid") != target.uid:
        return f"UID is now {meta.get('uid')} (a new pod under the same name)"
    if namespace is not None and terminating(namespace):
        return "its namespace is being deleted (Terminating)"
    mode = namespace_modes([namespace]).get(target.namespace) if namespace is not None else None
    # The IP filter is re-applied as discovery applied it: loopback passes only when it is the very IP that
    # discovery already accepted (it does so only with allow_loopback); a changed IP is refused below anyway.
    same_ip = status.get("podIP") == target.ip
    reason = _skip_reason(pod, mode, True, require_controller, allow_loopback=same_ip)
    if reason is not None:
        return f"discovery now skips it: {reason}"
    if mode != target.mode:
        return f"namespace mode is now {mode}"
    if status.get("podIP") != target.ip:
        return f"pod IP is now {status.get('podIP')}"
    if controller_of(meta) != target.owner:
        return "its controller owner changed"
    if _restarts(status) != target.restart_count:
        return "a container restarted (new detector state needed)"
    return None
