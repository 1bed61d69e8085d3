"""Kubernetes Events (core/v1) for what the watchdog decided: on the pod, on its top controller owner, and
on a Node. Best effort by design: a failure is logged and counted, never raised.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Any

from watchdog.discovery import OwnerRef, ScrapeTarget, controller_of
from watchdog.kube import KubeClient, KubeError
from watchdog.metrics import Metrics

COMPONENT = "vllm-stall-watchdog"
MAX_MESSAGE = 1024
MAX_OWNER_DEPTH = 5
log = logging.getLogger("watchdog.events")


def event_body(namespace: str, involved: dict[str, str], reason: str, message: str, instance: str,
               now: dt.datetime | None = None, action: str = "None") -> dict[str, Any]:
    """A core/v1 Event (type Warning) on ``involved`` ({apiVersion, kind, name, uid}); message cut to 1 KiB."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message.encode()) > MAX_MESSAGE:
        message = message.encode()[: MAX_MESSAGE - 3].decode("utf-8", "ignore") + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        # Nodes are cluster-scoped: their Events live in "default" but the object itself has no namespace.
        "involvedObject": dict(involved) if involved.get("kind") == "Node" else {**involved, "namespace": namespace},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "action": action,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    """Writes one Event per object per decision through ``kube``; counts failures in ``metrics``."""

    def __init__(self, kube: KubeClient, metrics: Metrics) -> None:
        self.kube, self.metrics = kube, metrics
        self.instance = socket.gethostname()

    def top_owner(self, target: ScrapeTarget) -> OwnerRef | None:
        """Walk controller owner references up (ReplicaSet -> Deployment, ...); stop where a GET fails."""
        ref = target.owner
        for _ in range(MAX_OWNER_DEPTH):
            if ref is None:
                return None
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
            self._create(target.namespace, obj, reason, message, action)

    def _create(self, namespace: str, obj: dict[str, str], reason: str, message: str, action: str) -> None:
        body = event_body(namespace, obj, reason, message, self.instance, action=action)
        try:
            self.kube.create_event(namespace, body)
        except Exception as exc:  # best effort by design
            self.metrics.event_failures.inc()
            log.warning("could not record %s Event on %s %s/%s: %s", reason, obj["kind"], namespace, obj["name"], exc)
