"""Kubernetes Event bodies and reasons (core/v1): what the watchdog tells ``kubectl describe``. Pure: the
caller passes the time; :mod:`watchdog.adapters.events` writes them, best effort.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from watchdog.core.model import COMPONENT

REASON_DELETED = "StalledPodDeleted"
REASON_DRY_RUN = "StalledPodDryRun"
REASON_DEFERRED = "StalledPodDeletionDeferred"
#: Nodes are cluster-scoped: the API server accepts their core/v1 Events in "default".
NODE_EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024
__all__ = ["COMPONENT", "MAX_MESSAGE", "NODE_EVENT_NAMESPACE", "REASON_DEFERRED", "REASON_DELETED",
           "REASON_DRY_RUN", "event_body"]


def event_body(namespace: str, involved: dict[str, str], reason: str, message: str, instance: str,
               now: dt.datetime, action: str = "None") -> dict[str, Any]:
    """A core/v1 Event (type Warning) on ``involved`` ({apiVersion, kind, name, uid}) at ``now`` (UTC);
    message cut to 1 KiB."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
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
