"""Kubernetes Events (core/v1) for what the watchdog decided: on the pod, on its top controller owner, and
on a Node. Best effort by design: a failure is logged and counted, never raised.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Any, Protocol

from watchdog.adapters.kube import KubeError
from watchdog.adapters.metrics import Metrics
from watchdog.core.discovery import controller_of
from watchdog.core.events import NODE_EVENT_NAMESPACE, event_body
from watchdog.core.model import OwnerRef, ScrapeTarget

MAX_OWNER_DEPTH = 5


class EventApi(Protocol):
    """The two calls the recorder makes (adapters.kube.KubeClient has them)."""

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...

log = logging.getLogger("watchdog.adapters.events")


class EventRecorder:
    """Writes one Event per object per decision through ``kube``; counts failures in ``metrics``."""

    def __init__(self, kube: EventApi, metrics: Metrics) -> None:
        self.kube, self.metrics = kube, metrics
        self.instance = socket.gethostname()

    def top_owner(self, target: ScrapeTarget) -> OwnerRef | None:
        """Walk controller owner references up (ReplicaSet -> Deployment, ...); stop where a GET fails."""
        ref = target.owner
        for _ in range(MAX_OWNER_DEPTH):
            if ref is None:
                return None
            if ref.kind == "Node":  # a static pod's mirror: the Node is cluster-scoped and owns nothing above
                return ref
            try:
                obj = self.kube.get_object(ref.api_version, ref.kind, target.namespace, ref.name)
            except KubeError as exc:
                log.info("owner chain stops at %s/%s: %s", ref.kind, ref.name, exc)
                return ref
            parent = controller_of((obj or {}).get("metadata") or {})
            if parent is None:
                return ref
            ref = parent
        return ref

    def on_pod_and_owner(self, target: ScrapeTarget, reason: str, message: str, action: str = "None") -> None:
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
            # A cluster-scoped owner (a Node, for a static pod's mirror) gets its Event where the API server
            # accepts Events about cluster-scoped objects (else 422: involvedObject.namespace mismatch).
            namespace = NODE_EVENT_NAMESPACE if obj["kind"] == "Node" else target.namespace
            self._create(namespace, obj, reason, message, action)

    def _create(self, namespace: str, obj: dict[str, str], reason: str, message: str, action: str) -> None:
        body = event_body(namespace, obj, reason, message, self.instance, dt.datetime.now(dt.UTC), action=action)
        try:
            self.kube.create_event(namespace, body)
        except Exception as exc:  # best effort by design
            self.metrics.event_failures.inc()
            log.warning("could not record %s Event on %s %s/%s: %s", reason, obj["kind"], namespace, obj["name"], exc)
