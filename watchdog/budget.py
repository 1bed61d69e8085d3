"""The deletion budget survives restarts: rebuild it from this watchdog's own recent ``StalledPodDeleted``
Events (I/O). Until that read succeeds the policy fails closed (``budget_unknown`` deferrals).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection

from watchdog.events import COMPONENT
from watchdog.kube import KubeClient, KubeError
from watchdog.policy import REASON_DELETED, DeletionPolicy

log = logging.getLogger("watchdog.budget")


def _unix(stamp: str) -> float | None:
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return dt.datetime.strptime(stamp, fmt).replace(tzinfo=dt.UTC).timestamp()
        except (TypeError, ValueError):
            continue
    return None


def restore_budget(kube: KubeClient, policy: DeletionPolicy, now: float, wall_now: float,
                   namespaces: Collection[str]) -> bool:
    """Seed ``policy`` with the pod deletions this component recorded within the budget window in
    ``namespaces`` (the ones this watchdog watches, so shards with their own namespace selectors do not
    charge each other).

    ``now``: monotonic seconds; ``wall_now``: Unix seconds (Event timestamps are wall clock). One API request.
    Returns False (and logs) when the Events cannot be read; the caller tries again next cycle.
    """
    try:
        events = kube.list_events(f"reason={REASON_DELETED}")
    except KubeError as exc:
        log.warning("cannot read earlier deletions back (%s): deferring deletions until it works", exc)
        return False
    window = policy.rails.budget_window_s
    restored = 0
    for event in events:
        mine = event.get("reportingComponent") == COMPONENT or (event.get("source") or {}).get("component") == COMPONENT
        involved = event.get("involvedObject") or {}
        if not mine or involved.get("kind") != "Pod":
            continue
        when = _unix(str(event.get("lastTimestamp") or event.get("eventTime") or ""))
        if when is None:
            continue
        age = max(0.0, wall_now - when)
        namespace = str(involved.get("namespace") or (event.get("metadata") or {}).get("namespace"))
        if age < window and namespace in namespaces:
            policy.seed_deletion(now - age, namespace)
            restored += 1
    log.info("deletion budget restored from own Events: %d deletions in the last %g s", restored, window)
    return True
