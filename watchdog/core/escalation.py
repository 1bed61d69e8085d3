"""Node escalation's memory: which distinct pods, of which tenants, were deleted as stalled on which node,
when. Pure (times are the caller's monotonic seconds); :mod:`watchdog.controller.nodes` applies the taint it calls
for.

The rule: a node is escalated once at least ``threshold`` distinct pods **from at least ``min_tenants`` (2)
distinct tenants** were deleted as stalled on it within the window (a pod's tenant:
:func:`~watchdog.core.discovery.tenant_of`); why two tenants, and what a fleet of one tenant gets instead:
docs/safety.md "Node escalation".
"""

from __future__ import annotations

REASON_NODE_TAINTED = "StalledNodeTainted"
MAX_NODES = 4096  # bound on nodes remembered by NodeStallHistory


class NodeStallHistory:
    """Pure memory of stall deletions per node: distinct pod UIDs (and their tenants) seen within the last
    ``window_s`` seconds.

    ``threshold`` (>= 1): how many different pods must have stalled on one node within the window;
    ``min_tenants`` (1..threshold, default 2): from how many different tenants they must come (see the module
    docstring). Raises ValueError for a threshold < 1, a window <= 0 or ``min_tenants`` out of range.
    """

    def __init__(self, threshold: int, window_s: float, min_tenants: int = 2) -> None:
        if threshold < 1 or not window_s > 0:
            raise ValueError(f"node escalation needs threshold >= 1 and window > 0 s, got {threshold}, {window_s:g}")
        if not 1 <= min_tenants <= threshold:
            raise ValueError(f"node escalation needs 1 <= min_tenants <= threshold, got {min_tenants}")
        self.threshold, self.window_s, self.min_tenants = threshold, window_s, min_tenants
        self._seen: dict[str, dict[str, tuple[float, str]]] = {}  # node -> pod uid -> (last time, tenant)

    def record(self, node: str, pod_uid: str, t: float, tenant: str) -> bool:
        """Remember that ``pod_uid`` of ``tenant`` on ``node`` was deleted as stalled at ``t`` (monotonic s);
        return True when the node is now at or over the threshold: distinct pods with ``t - seen <= window_s``,
        from at least ``min_tenants`` tenants. The same pod counted twice stays one pod."""
        pods = self._seen.setdefault(node, {})
        pods[pod_uid] = (t, tenant)
        self._prune(node, t)
        if len(self._seen) > MAX_NODES:
            for other in list(self._seen):
                self._prune(other, t)
            while len(self._seen) > MAX_NODES:  # still too many: forget the least recent node
                del self._seen[min(self._seen, key=lambda n: max(when for when, _ in self._seen[n].values()))]
        return self.count(node) >= self.threshold and len(self.tenants(node)) >= self.min_tenants

    def count(self, node: str) -> int:
        """Distinct pods remembered for ``node`` (as of the last :meth:`record`)."""
        return len(self._seen.get(node, {}))

    def tenants(self, node: str) -> set[str]:
        """The tenants of those pods."""
        return {tenant for _, tenant in self._seen.get(node, {}).values()}

    def _prune(self, node: str, t: float) -> None:
        pods = {uid: seen for uid, seen in self._seen.get(node, {}).items() if t - seen[0] <= self.window_s}
        if pods:
            self._seen[node] = pods
        else:
            self._seen.pop(node, None)
