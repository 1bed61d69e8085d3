"""Node escalation (opt-in, off by default): taint a node on which stalls keep repeating.

When the watchdog has deleted stalled pods of ``threshold`` (2) different pods on the same node within
``window_s`` (3600 s), the node likely has a bad GPU: :class:`NodeEscalator` adds a taint (default
``vllm-watchdog.io/stalled=true:NoSchedule``) so replacement pods stop landing there, and records a Warning
Event ``StalledNodeTainted`` on the Node (in namespace ``default``, where node Events live). It never removes a
taint: a human checks the host and runs ``kubectl taint nodes NODE vllm-watchdog.io/stalled-``.

- :class:`NodeStallHistory` is pure (no I/O): which distinct pods stalled on which node, when (monotonic s).
- The taint is written with a JSON merge patch of the whole ``spec.taints`` list (the taints read plus ours)
  guarded by the Node's ``resourceVersion``: a concurrent change gives 409, which is reported as "error" and
  NOT blindly retried (the next deletion on that node reads the node again).
- Nothing here raises: API errors are logged and returned as "error"; the Event is best effort.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable
from typing import Literal

from watchdog.events import event_body
from watchdog.kube import KubeClient, KubeError

REASON_NODE_TAINTED = "StalledNodeTainted"
EVENT_NAMESPACE = "default"
DEFAULT_TAINT = "vllm-watchdog.io/stalled=true:NoSchedule"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_NODES = 4096  # bound on nodes remembered by NodeStallHistory
log = logging.getLogger("watchdog.escalation")

Outcome = Literal["tainted", "already_tainted", "below_threshold", "dry_run", "no_node", "error"]
# A qualified name (optional DNS prefix "/"), and a label value (may be empty).
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def parse_taint(text: str) -> dict[str, str]:
    """``key[=value]:Effect`` -> ``{"key", "value"?, "effect"}`` (kubectl's taint syntax).

    Effect is NoSchedule, PreferNoSchedule or NoExecute; key a qualified name (``prefix/name``), value a label
    value (optional). Raises ValueError with a one-line message naming the problem.
    """
    head, sep, effect = text.strip().rpartition(":")
    if not sep or not head:
        raise ValueError(f"invalid taint {text!r}: expected key[=value]:Effect, e.g. {DEFAULT_TAINT!r}")
    if effect not in EFFECTS:
        raise ValueError(f"invalid taint {text!r}: effect {effect!r} is not one of {', '.join(EFFECTS)}")
    key, has_value, value = head.partition("=")
    if not _KEY.match(key):
        raise ValueError(f"invalid taint {text!r}: key {key!r} is not a qualified name ([prefix/]name)")
    if not _VALUE.match(value):
        raise ValueError(f"invalid taint {text!r}: value {value!r} is not a valid label value")
    return {"key": key, "value": value, "effect": effect} if has_value else {"key": key, "effect": effect}


class NodeStallHistory:
    """Pure memory of stall deletions per node: distinct pod UIDs seen within the last ``window_s`` seconds.

    ``threshold`` (>= 1): how many different pods must have stalled on one node within the window.
    Raises ValueError for a threshold < 1 or a window <= 0.
    """

    def __init__(self, threshold: int = 2, window_s: float = 3600.0) -> None:
        if threshold < 1 or not window_s > 0:
            raise ValueError(f"node escalation needs threshold >= 1 and window > 0 s, got {threshold}, {window_s:g}")
        self.threshold, self.window_s = threshold, window_s
        self._seen: dict[str, dict[str, float]] = {}  # node -> pod uid -> last time (monotonic s)

    def record(self, node: str, pod_uid: str, t: float) -> bool:
        """Remember that ``pod_uid`` on ``node`` was deleted as stalled at ``t`` (monotonic s); return True when
        the node is now at or over the threshold (distinct pods with ``t - seen <= window_s``). The same pod
        counted twice stays one pod."""
        pods = self._seen.setdefault(node, {})
        pods[pod_uid] = t
        self._prune(node, t)
        if len(self._seen) > MAX_NODES:
            for other in list(self._seen):
                self._prune(other, t)
            while len(self._seen) > MAX_NODES:  # still too many: forget the least recent node
                del self._seen[min(self._seen, key=lambda n: max(self._seen[n].values()))]
        return self.count(node) >= self.threshold

    def count(self, node: str) -> int:
        """Distinct pods remembered for ``node`` (as of the last :meth:`record`)."""
        return len(self._seen.get(node, {}))

    def _prune(self, node: str, t: float) -> None:
        pods = {uid: seen for uid, seen in self._seen.get(node, {}).items() if t - seen <= self.window_s}
        if pods:
            self._seen[node] = pods
        else:
            self._seen.pop(node, None)


class NodeEscalator:
    """Taints a node once :class:`NodeStallHistory` says stalls repeat there (see the module docstring).

    ``taint``: kubectl syntax, parsed at construction (ValueError when malformed). ``dry_run``: decide and log,
    never read or write the Node. ``clock``: monotonic seconds for the history.
    """

    def __init__(self, kube: KubeClient, history: NodeStallHistory, taint: str = DEFAULT_TAINT,
                 dry_run: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.history, self.dry_run, self.clock = kube, history, dry_run, clock
        self.taint = parse_taint(taint)
        self.instance = socket.gethostname()

    def on_deletion(self, node_name: str | None, pod_uid: str, pod_ref: str) -> Outcome:
        """Called after the watchdog deleted ``pod_ref`` (``namespace/name``, uid ``pod_uid``) that ran on
        ``node_name``. Returns what happened; never raises."""
        if not node_name:
            return "no_node"
        if not self.history.record(node_name, pod_uid, self.clock()):
            return "below_threshold"
        why = (f"{self.history.count(node_name)} different pods were deleted as stalled on this node within "
               f"{self.history.window_s:g} s (latest: {pod_ref})")
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
            self.kube.patch_node_taints(node_name, [*taints, dict(self.taint)], str(meta.get("resourceVersion", "")))
        except (KubeError, ValueError) as exc:
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
        body = event_body(EVENT_NAMESPACE, {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": uid},
                          REASON_NODE_TAINTED, message, self.instance, action="Taint")
        try:
            self.kube.create_event(EVENT_NAMESPACE, body)
        except Exception as exc:  # best effort by design
            log.warning("could not record %s Event on node %s: %s", REASON_NODE_TAINTED, node_name, exc)
