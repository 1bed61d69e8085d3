"""Kubernetes Events (core/v1) for what the watchdog decided: on the pod, on its top controller owner, and
on a Node. Best effort by design: a failure is logged and counted, never raised.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from watchdog.adapters.kube import Fenced, KubeError
from watchdog.adapters.metrics import Metrics
from watchdog.core.discovery import controller_of
from watchdog.core.events import escape_controls, event_body
from watchdog.core.model import OwnerRef, WatchedPod
from watchdog.core.owners import unresolvable, unverified

MAX_OWNER_DEPTH = 5
#: Pods whose top owner is remembered (oldest forgotten first); entries go when their pod is gone.
MAX_OWNERS_CACHED = 1024
#: After a transient failure (no answer, 429, 5xx) the owner walk of that pod is tried again no sooner than this.
OWNER_RETRY_SECONDS = 300.0


class EventApi(Protocol):
    """The read the recorder makes (adapters.kube.KubeClient has it); it writes through the actuator."""

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...


class PodRef(Protocol):
    """What an Event on a pod names: a :class:`WatchedPod`, or a pod discovery does not watch (an Overlap)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


class EventSink(Protocol):
    """Where Events are written: the actuator (watchdog.controller.actuator), behind the leadership fence."""

    def post_event(self, namespace: str, body: dict[str, Any]) -> None: ...


log = logging.getLogger("watchdog.adapters.events")


class CachedOwner(NamedTuple):
    """A pod's walked owner: from which controller reference, the top owner verified (or None), until when."""

    start: OwnerRef | None
    top: OwnerRef | None
    until: float


def _shown(ref: OwnerRef) -> str:
    """``Kind/name`` of a tenant-written reference for a log line: controls escaped, cut short."""
    return escape_controls(f"{ref.kind}/{ref.name}"[:120])


class EventRecorder:
    """Writes one Event per object per decision through ``kube``; counts failures in ``metrics``."""

    def __init__(self, kube: EventApi, actuator: EventSink, metrics: Metrics, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.actuator, self.metrics = kube, actuator, metrics
        self.instance = socket.gethostname()
        self.clock = clock
        self.owners: dict[str, CachedOwner] = {}  # pod UID -> its walked owner (bounded, forgotten with the pod)

    def top_owner(self, target: WatchedPod) -> OwnerRef | None:
        """The highest controller owner of the pod the watchdog verified (ReplicaSet -> Deployment, ...), or None
        when not even the pod's own controller is verified (:mod:`watchdog.core.owners`: a known kind, read in the
        pod's namespace, with the reference's uid). A Node (a static pod's mirror), any other unknown or
        cluster-scoped kind, a failed read or another uid stops the walk: the owners below stay, none above.

        Walked once per pod UID and controller reference (a pod with 64 stalled engines costs one walk), again
        only after :data:`OWNER_RETRY_SECONDS` when the walk ended on a transient failure."""
        now = self.clock()
        cached = self.owners.get(target.uid)
        if cached is not None and cached.start == target.owner and now < cached.until:
            return cached.top
        top, transient = self._walk(target)
        self.owners.pop(target.uid, None)
        while len(self.owners) >= MAX_OWNERS_CACHED:
            del self.owners[next(iter(self.owners))]
        self.owners[target.uid] = CachedOwner(target.owner, top, now + OWNER_RETRY_SECONDS if transient else math.inf)
        return top

    def _walk(self, target: WatchedPod) -> tuple[OwnerRef | None, bool]:
        """(the highest verified owner or None, whether the walk ended on a transient failure)."""
        verified, ref = None, target.owner
        for _ in range(MAX_OWNER_DEPTH):
            if ref is None:
                break
            why = unresolvable(ref, target.namespace)
            if why is None:
                try:
                    obj = self.kube.get_object(ref.api_version, ref.kind, target.namespace, ref.name)
                except KubeError as exc:
                    log.info("owner chain of %s stops at %s: %s", target.ref, _shown(ref), exc)
                    return verified, exc.status in (0, 429) or exc.status >= 500
                why = unverified(obj, ref, target.namespace)
            if why is not None:
                log.info("owner chain of %s stops at %s: %s", target.ref, _shown(ref), why)
                break
            verified = ref
            ref = controller_of((obj or {}).get("metadata") or {})
        return verified, False

    def forget_pods(self, live_uids: set[str]) -> None:
        """Drop the walked owners of pods that are gone."""
        self.owners = {uid: c for uid, c in self.owners.items() if uid in live_uids}

    def once_on_pod(self, target: PodRef, reason: str, message: str) -> bool:
        """One Event on the pod alone (what concerns the pod's own settings, e.g. its annotations), written once
        per pod UID and reason however often the watchdog restarts: named after both, so a second create is
        refused (409: already told, kept by the API server for its Event TTL). False only when not sent because
        this replica may not write (a standby): try again as leader."""
        involved = {"apiVersion": "v1", "kind": "Pod", "name": target.name, "uid": target.uid}
        return self._create(target.namespace, involved, reason, message, "None", once=True)

    def on_pod_and_owner(self, target: WatchedPod, reason: str, message: str, action: str = "None") -> None:
        """One Event on the pod and one on its top controller owner (if any)."""
        involved = [{"apiVersion": "v1", "kind": "Pod", "name": target.name, "uid": target.uid}]
        try:
            owner = self.top_owner(target)
        except Exception:  # best effort: never let the owner walk break the cycle
            log.exception("owner chain walk failed for %s", target.ref)
            owner = None
        if owner is not None:
            involved.append({"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name,
                             "uid": owner.uid})
        for obj in involved:
            # The owner, if any, is one the walk verified in the pod's namespace: never a Node or another
            # cluster-scoped object (no tenant-steered Event in "default").
            self._create(target.namespace, obj, reason, message, action)

    def _create(self, namespace: str, obj: dict[str, str], reason: str, message: str, action: str, *,
                once: bool = False) -> bool:
        """Write one Event; False only when fenced (not sent). ``once``: a named Event (see :meth:`once_on_pod`)."""
        body = event_body(namespace, obj, reason, message, self.instance, dt.datetime.now(dt.UTC), action=action,
                          once=once)
        try:
            self.actuator.post_event(namespace, body)
        except Fenced:  # a standby (or a leader that lost touch) writes no Event: not a failure
            return False
        except KubeError as exc:
            if not (once and exc.status == 409):  # 409 on a named Event: written before (by us, or a past process)
                self._failed(namespace, obj, reason, exc)
        except Exception as exc:  # best effort by design
            self._failed(namespace, obj, reason, exc)
        return True

    def _failed(self, namespace: str, obj: dict[str, str], reason: str, exc: Exception) -> None:
        self.metrics.event_failures.inc()
        log.warning("could not record %s Event on %s %s/%s: %s", reason, obj["kind"], namespace, obj["name"], exc)
