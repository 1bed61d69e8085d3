"""The deletion budget survives restarts and leader changes: read this watchdog's recent deletions back into
the policy — from its deletion ledger (one GET of a small ConfigMap it owns) when there is one, else from its
own ``StalledPodDeleted`` Events (one LIST over every namespace, which the API server answers by scanning
etcd: fine on a small cluster, slow on a busy one). Until a read succeeds the policy fails closed
(``budget_unknown``)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from watchdog.adapters.kube import KubeError
from watchdog.controller.ledger import DeletionLedger
from watchdog.controller.ports import KubeApi
from watchdog.core.budget import DELETED_EVENTS_SELECTOR, deletions_from_events
from watchdog.core.ledger import deletions as ledger_deletions
from watchdog.core.policy import DeletionPolicy

log = logging.getLogger("watchdog.controller.budget")


def restore_budget(kube: KubeApi, policy: DeletionPolicy, now: float, wall_now: float,
                   namespaces: Collection[str], ledger: DeletionLedger | None = None) -> bool:
    """Restore ``policy``'s deletion history in ``namespaces`` from ``ledger``, else from own Events. ``now``:
    monotonic seconds; ``wall_now``: Unix seconds. False (logged; the caller tries again next cycle) when
    neither can be read."""
    window = policy.rails.deletion_window_seconds
    entries = ledger.read() if ledger is not None else None
    if ledger is not None and entries is not None:
        restored = ledger_deletions(entries, now=now, wall_now=wall_now, window_s=window, namespaces=namespaces)
        policy.restore(restored)
        log.info("deletion budget restored from the ledger %s: %d deletions in the last %g s", ledger.ref,
                 len(restored), window)
        return True
    try:
        events = kube.list_events(DELETED_EVENTS_SELECTOR)
    except KubeError as exc:
        log.warning("cannot read earlier deletions back (%s): deferring deletions until it works", exc)
        return False
    restored = deletions_from_events(events, now=now, wall_now=wall_now, window_s=window, namespaces=namespaces)
    policy.restore(restored)
    log.info("deletion budget restored from own Events: %d deletions in the last %g s", len(restored), window)
    return True
