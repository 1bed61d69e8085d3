"""The deletion budget survives restarts: read this watchdog's own recent ``StalledPodDeleted`` Events back
into the policy (one API request). Until that read succeeds the policy fails closed (``budget_unknown``)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from watchdog.adapters.kube import KubeError
from watchdog.controller.ports import KubeApi
from watchdog.core.budget import DELETED_EVENTS_SELECTOR, deletions_from_events
from watchdog.core.policy import DeletionPolicy

log = logging.getLogger("watchdog.controller.budget")


def restore_budget(kube: KubeApi, policy: DeletionPolicy, now: float, wall_now: float,
                   namespaces: Collection[str]) -> bool:
    """Restore ``policy``'s deletion history from own Events in ``namespaces``. ``now``: monotonic seconds;
    ``wall_now``: Unix seconds. False (logged; the caller tries again next cycle) when they cannot be read."""
    try:
        events = kube.list_events(DELETED_EVENTS_SELECTOR)
    except KubeError as exc:
        log.warning("cannot read earlier deletions back (%s): deferring deletions until it works", exc)
        return False
    window = policy.rails.deletion_window_seconds
    restored = deletions_from_events(events, now=now, wall_now=wall_now, window_s=window, namespaces=namespaces)
    policy.restore(restored)
    log.info("deletion budget restored from own Events: %d deletions in the last %g s", len(restored), window)
    return True
