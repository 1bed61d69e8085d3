"""Node escalation's memory: which distinct pods were deleted as stalled on which node, when. Pure (times are
the caller's monotonic seconds); :mod:`watchdog.adapters.nodes` applies the taint it calls for."""

from __future__ import annotations

REASON_NODE_TAINTED = "StalledNodeTainted"
MAX_NODES = 4096  # bound on nodes remembered by NodeStallHistory


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
