"""Node escalation (opt-in, off by default; docs/safety.md "Node escalation" says when and why): taint a node on
which stalls of at least two tenants keep repeating (:class:`~watchdog.core.escalation.NodeStallHistory`, pure,
decides), with a Warning Event ``StalledNodeTainted`` on the Node; never remove a taint.

The taint is written with a JSON merge patch of the whole ``spec.taints`` list (the taints read plus ours) guarded
by the Node's ``resourceVersion``: a concurrent change gives 409, reported as "error" and NOT blindly retried (the
next deletion on that node reads the node again). Nothing here raises: API errors are logged and returned as
"error"; the Event is best effort.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

from watchdog.adapters.events import EventSink
from watchdog.adapters.kube import Fenced, KubeClient, KubeError
from watchdog.core.escalation import REASON_NODE_TAINTED, NodeStallHistory
from watchdog.core.events import NODE_EVENT_NAMESPACE, event_body
from watchdog.core.taints import DEFAULT_TAINT, parse_taint

log = logging.getLogger("watchdog.controller.nodes")

TaintOutcome = Literal["tainted", "already_tainted", "below_threshold", "dry_run", "no_node", "error"]


class NodeWriter(EventSink, Protocol):
    """What node escalation writes, through the actuator (watchdog.controller.actuator): the taint and its Event."""

    def taint_node(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]: ...


class NodeEscalator:
    """Taints a node once :class:`NodeStallHistory` says stalls repeat there (see the module docstring).

    ``taint``: kubectl syntax, parsed at construction (ValueError when malformed). ``dry_run``: decide and log,
    never read or write the Node. ``clock``: monotonic seconds for the history.
    """

    def __init__(self, kube: KubeClient, actuator: NodeWriter, history: NodeStallHistory, taint: str = DEFAULT_TAINT,
                 dry_run: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.actuator, self.history, self.dry_run, self.clock = kube, actuator, history, dry_run, clock
        self.taint = parse_taint(taint)
        self.instance = socket.gethostname()

    def on_deletion(self, node_name: str | None, pod_uid: str, pod_ref: str, tenant: str) -> TaintOutcome:
        """Called after the watchdog deleted ``pod_ref`` (``namespace/name``, uid ``pod_uid``, of ``tenant``)
        that ran on ``node_name``. Returns what happened; never raises."""
        if not node_name:
            return "no_node"
        if not self.history.record(node_name, pod_uid, self.clock(), tenant):
            return "below_threshold"
        why = (f"{self.history.count(node_name)} different pods of {len(self.history.tenants(node_name))} "
               f"tenants were deleted as stalled on this node within {self.history.window_s:g} s (latest: "
               f"{pod_ref})")
        if self.dry_run:
            log.warning("node escalation DRY-RUN: would taint node %s with %s: %s", node_name, self._text(), why)
            return "dry_run"
        try:
            node = self.kube.get_node(node_name)
            if node is None:
                log.warning("node escalation: node %s is gone; nothing to taint", node_name)
                return "error"
            taints = list((node.get("spec") or {}).get("taints") or [])
            if any(t.get("key") == self.taint["key"] and t.get("effect") == self.taint["effect"] for t in taints):
                return "already_tainted"
            meta = node.get("metadata") or {}
            self.actuator.taint_node(node_name, [*taints, dict(self.taint)],
                                            str(meta.get("resourceVersion", "")))
        except (KubeError, ValueError, Fenced) as exc:
            log.warning("node escalation: could not taint node %s (not retried; the next stall there decides "
                        "again): %s", node_name, exc)
            return "error"
        log.warning("node escalation: tainted node %s with %s: %s", node_name, self._text(), why)
        self._event(node_name, str(meta.get("uid", "")), f"tainted {self._text()}: {why}; remove the taint "
                    "after checking the host")
        return "tainted"

    def _text(self) -> str:
        value = f"={self.taint['value']}" if "value" in self.taint else ""
        return f"{self.taint['key']}{value}:{self.taint['effect']}"

    def _event(self, node_name: str, uid: str, message: str) -> None:
        """A Warning Event on the Node; best effort (logged, never raised)."""
        body = event_body(NODE_EVENT_NAMESPACE, {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": uid},
                          REASON_NODE_TAINTED, message, self.instance, dt.datetime.now(dt.UTC), action="Taint")
        try:
            self.actuator.post_event(NODE_EVENT_NAMESPACE, body)
        except Exception as exc:  # best effort by design
            log.warning("could not record %s Event on node %s: %s", REASON_NODE_TAINTED, node_name, exc)
