"""The one door to the cluster for every side effect (I/O): the only module that calls the Kubernetes API's
write methods — pod DELETE and eviction, the readiness gate's ``pods/status`` patch, the node taint, the deletion
ledger's ConfigMap, Events — and the one read that sits between a decision and its write (``pods/log``, the
evidence's log tail); ``tests/test_architecture.py`` holds every other module to that. The one write outside is the
leader election's own Lease (:mod:`watchdog.adapters.leader`): the campaign that defines the fence.

The leadership fence (:meth:`watchdog.adapters.leader.LeaderElector.holds_for` with the write's own timeout plus
:data:`~watchdog.core.model.FENCE_MARGIN_S`; always open without election) is asked right before each request
leaves, after every slow step of the decision: a write it holds back is not sent (a pod write's outcome ``fenced``;
the other writes raise :class:`Fenced`). A pod write's answer is one closed :class:`Applied` outcome
(:func:`watchdog.core.policy.ambiguous` sorts a failed request, here alone); the other writes raise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from watchdog.adapters.kube import DeleteResult, EvictResult, Fenced, KubeError, PatchResult
from watchdog.core.model import FENCE_MARGIN_S, WatchedPod
from watchdog.core.policy import ambiguous, fate_after_lost_answer
from watchdog.core.vocab import RemovalAction, WriteOutcome

log = logging.getLogger(__name__)


#: Whether this replica's leadership holds for more than the given seconds (always True without election).
Fence = Callable[[float], bool]


def unfenced(_seconds: float) -> bool:
    """The fence without leader election: one replica, always allowed to write."""
    return True


@dataclass(frozen=True)
class Removal:
    """A decided removal of one pod (the remediator's): ``action`` delete, or evict (PodDisruptionBudgets hold);
    ``grace_period_s`` None keeps the pod's own."""

    pod: WatchedPod
    action: RemovalAction
    grace_period_s: int | None


@dataclass(frozen=True)
class Applied:
    """What a pod write came to: ``outcome`` (one vocabulary for removals and gate patches) and, when it was not
    done, ``error`` (the one-line why: the API's error, the fence's, the ledger's) and ``reason`` (a lost answer's:
    timeout, 503, ...; on a ``done`` removal: its answer was lost and the GET after it showed it applied)."""

    outcome: WriteOutcome
    error: str = ""
    reason: str = ""


_DONE = {"deleted", "evicted", "patched"}
#: A definite "not applied": a removal's ledger intent is withdrawn (a 429 too: a tenant's own PodDisruptionBudget
#: never spends the budget nor fills the ledger).
_NOT_APPLIED = {"refused", "not_found", "conflict", "blocked", "several_pdbs"}


@dataclass(frozen=True)
class GateChange:
    """A decided readiness-gate condition of one pod (the quarantine's), set through ``pods/status``."""

    pod: WatchedPod
    condition: dict[str, Any]


class Intents(Protocol):
    """The deletion ledger's write-ahead record (:class:`watchdog.controller.ledger.DeletionLedger`)."""

    @property
    def ref(self) -> str: ...
    def intend(self, namespace: str, pod: str, uid: str) -> bool: ...
    def withdraw(self, uid: str) -> bool: ...


class Writes(Protocol):
    """The API calls the actuator makes (adapters.kube.KubeClient has them): its writes and the log read."""

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> DeleteResult: ...
    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> EvictResult: ...
    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, Any]) -> PatchResult: ...
    def patch_node_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str,
                          ) -> dict[str, Any]: ...
    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...
    def read_pod_log(self, namespace: str, name: str, container: str, lines: int, limit_bytes: int) -> bytes: ...
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Actuator:
    """Every write through ``kube`` behind ``fence``; ``write_timeout_s``: one API request's timeout (the setting
    ``apiTimeoutSeconds``); ``ledger``: the deletion ledger every removal is recorded in ahead of it (None:
    budgetLedger off), set once it is built (it writes through this door)."""

    def __init__(self, kube: Writes, *, fence: Fence = unfenced, write_timeout_s: float) -> None:
        self.kube, self.fence, self.write_timeout_s = kube, fence, write_timeout_s
        self.ledger: Intents | None = None

    def _fenced(self, what: str) -> None:
        """Raise :class:`Fenced` unless this replica's Lease outlasts the write's timeout and the margin."""
        if not self.fence(self.write_timeout_s + FENCE_MARGIN_S):
            log.info("%s held back by the leadership fence", what)
            raise Fenced(what)

    def apply(self, change: GateChange) -> Applied:
        """Set one decided readiness-gate condition through ``pods/status``, the pod's UID as its precondition."""
        pod = change.pod
        return self._answer(f"readiness gate of pod {pod.ref}", lambda: self.kube.patch_pod_condition(
            pod.namespace, pod.name, pod.uid, change.condition))

    def remove(self, removal: Removal, *, again: bool = False) -> Applied:
        """The whole removal protocol, the pod's UID as its precondition: the ledger intent (not written:
        ``unrecorded``, nothing sent), the fence, the DELETE or eviction, after a lost answer a GET (:meth:`gone`:
        applied is ``done`` with the lost ``reason``, else ``lost``), the intent withdrawn on a definite "not
        applied" unless sent ``again`` after a lost answer (the first may have been applied). Any action but delete
        or evict is refused before anything is written (never a delete by default: ValueError)."""
        pod, verb = removal.pod, removal.action
        if verb not in ("delete", "evict"):
            raise ValueError(f"remove: {verb!r} is not a removal (delete or evict)")
        if self.ledger is not None and not self.ledger.intend(pod.namespace, pod.name, pod.uid):
            return Applied("unrecorded", f"the deletion ledger {self.ledger.ref} could not be written: nothing is "
                           "removed without its durable record")
        send = self.kube.evict_pod if verb == "evict" else self.kube.delete_pod
        applied = self._answer(f"{verb} pod {pod.ref}", lambda: send(pod.namespace, pod.name, pod.uid,
                                                                      removal.grace_period_s))
        if applied.outcome == "lost":
            fate = self.gone(pod)
            if fate is True:
                return Applied("done", reason=applied.reason)
            seen = "the pod is still there" if fate is False else f"the pod cannot be read ({fate})"
            return Applied("lost", f"answer lost ({applied.error}) and {seen}", applied.reason)
        if applied.outcome in _NOT_APPLIED and not again and self.ledger is not None:
            self.ledger.withdraw(pod.uid)
        return applied

    def gone(self, pod: WatchedPod) -> bool | KubeError:
        """The GET after a lost answer: whether the removal took effect (:func:`fate_after_lost_answer`: gone,
        terminating or replaced), or why the pod could not be read."""
        try:
            return fate_after_lost_answer(self.kube.get_pod(pod.namespace, pod.name), pod.uid)
        except KubeError as exc:
            return exc

    def _answer(self, what: str, send: Callable[[], DeleteResult | EvictResult | PatchResult]) -> Applied:
        """Send one pod write behind the fence; what it came to."""
        try:
            self._fenced(what)
            result = send()
        except Fenced as exc:
            return Applied("fenced", str(exc))
        except KubeError as exc:
            return Applied("lost" if ambiguous(exc.status) else "refused", str(exc), exc.reason)
        return Applied("done" if result in _DONE else result)  # type: ignore[arg-type]  # the rest: WriteOutcome's

    def taint_node(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        self._fenced(f"taint of node {name}")
        return self.kube.patch_node_taints(name, taints, resource_version)

    def save_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create the ConfigMap, or replace it when ``body`` carries the ``resourceVersion`` it was read at."""
        name = str(body["metadata"]["name"])
        self._fenced(f"configmap {namespace}/{name}")
        if body["metadata"].get("resourceVersion"):
            return self.kube.replace_config_map(namespace, name, body)
        return self.kube.create_config_map(namespace, body)

    def post_event(self, namespace: str, body: dict[str, Any]) -> None:
        self._fenced(f"Event {body.get('reason')} in {namespace}")
        self.kube.create_event(namespace, body)

    def read_log(self, namespace: str, name: str, container: str, lines: int, limit_bytes: int) -> bytes:
        """The evidence's log tail: a read, not fenced, but here so that its place in a decision (before the
        fence of the write it precedes, never between) is visible in one module."""
        return self.kube.read_pod_log(namespace, name, container, lines, limit_bytes)
