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
           "REASON_DRY_RUN", "escape_controls", "event_body"]

# Characters a pod can put into its label values, names and annotation values that would rewrite what a reader
# sees: C0 controls (CR moves back over the line, ESC starts terminal sequences, LF forges a new log line), DEL,
# C1 controls (U+0085 is a line break too), the Unicode line/paragraph separators and the bidirectional
# overrides and isolates that reorder displayed text.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = {c: _NAMED.get(chr(c), f"\\x{c:02x}") for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                            *range(0x2066, 0x206A))})


def escape_controls(text: str) -> str:
    """``text`` with every control character written as a visible escape (``\\r``, ``\\x1b``, ``\\u2028``):
    the one rule for every place a pod-controlled string is written (text logs, Event messages). Printable text,
    backslashes included, is left as it is."""
    return text if text.isprintable() else text.translate(_ESCAPES)


def event_body(namespace: str, involved: dict[str, str], reason: str, message: str, instance: str,
               now: dt.datetime, action: str = "None") -> dict[str, Any]:
    """A core/v1 Event (type Warning) on ``involved`` ({apiVersion, kind, name, uid}) at ``now`` (UTC);
    message with control characters escaped (:func:`escape_controls`), then cut to 1 KiB."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    message = escape_controls(message)
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
