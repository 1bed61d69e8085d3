"""Budget arithmetic for the restart case: which of this watchdog's own ``StalledPodDeleted`` Events still
count against the deletion budget. Pure: the caller lists the Events and passes both clocks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from watchdog.core.events import REASON_DELETED
from watchdog.core.model import COMPONENT

#: The field selector that finds the Events :func:`deletions_from_events` reads.
DELETED_EVENTS_SELECTOR = f"reason={REASON_DELETED}"


def unix_time(stamp: str) -> float | None:
    """An RFC 3339 UTC stamp (as Events carry them) as Unix seconds; None when unreadable."""
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return dt.datetime.strptime(stamp, fmt).replace(tzinfo=dt.UTC).timestamp()
        except (TypeError, ValueError):
            continue
    return None


def still_counts(when: float, namespace: str, *, now: float, wall_now: float, window_s: float,
                 namespaces: Collection[str]) -> tuple[float, str] | None:
    """One earlier deletion at wall-clock ``when`` as (monotonic time, namespace) if it still counts against
    the budget (inside ``window_s``, in a namespace this watchdog watches), else None. The one rule both
    read-backs (own Events, the deletion ledger) apply."""
    age = max(0.0, wall_now - when)
    return (now - age, namespace) if age < window_s and namespace in namespaces else None


def deletions_from_events(events: Iterable[Mapping[str, Any]], *, now: float, wall_now: float, window_s: float,
                          namespaces: Collection[str]) -> list[tuple[float, str]]:
    """(monotonic time, namespace) of each pod deletion this component recorded within ``window_s`` in
    ``namespaces`` (the ones this watchdog watches, so shards do not charge each other). ``now``: monotonic
    seconds; ``wall_now``: Unix seconds (Event timestamps are wall clock)."""
    out = []
    for event in events:
        source = event.get("source") or {}
        mine = event.get("reportingComponent") == COMPONENT or source.get("component") == COMPONENT
        involved = event.get("involvedObject") or {}
        if not mine or involved.get("kind") != "Pod" or event.get("reason") != REASON_DELETED:
            continue
        when = unix_time(str(event.get("lastTimestamp") or event.get("eventTime") or ""))
        if when is None:
            continue
        namespace = str(involved.get("namespace") or (event.get("metadata") or {}).get("namespace"))
        counted = still_counts(when, namespace, now=now, wall_now=wall_now, window_s=window_s, namespaces=namespaces)
        if counted is not None:
            out.append(counted)
    return out
