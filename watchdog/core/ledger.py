"""The deletion ledger: this watchdog's recent removals, kept in one small ConfigMap it owns, so the deletion
budget survives a restart or a leader change with ONE cheap GET. It is the only record the budget is read back
from: Events can be written by any tenant allowed to create Events, so none of them is trusted to count.
Pure: encoding, trimming and the budget arithmetic; :mod:`watchdog.controller.ledger` does the I/O (and writes
each entry AHEAD of its removal).

The ConfigMap's ``data["deletions"]`` is a JSON list of ``{"t": unix seconds, "namespace", "pod", "uid"}``,
oldest first, trimmed to the budget window and to :data:`MAX_ENTRIES` entries on every write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DATA_KEY = "deletions"
MAX_ENTRIES = 256  # far above any sane budget (maxDeletions per window); bounds the object's size (~30 KiB)
MAX_TEXT = 512 * 1024  # a ledger larger than this is not parsed (someone else wrote it)


@dataclass(frozen=True)
class Entry:
    """One deletion: wall-clock time (Unix seconds), namespace, pod name and UID."""

    t: float
    namespace: str
    pod: str
    uid: str


def parse(data: Mapping[str, Any] | None) -> tuple[list[Entry], str | None]:
    """Entries from a ConfigMap's ``data``; the second value says why the ledger is unusable (then fall back)."""
    text = (data or {}).get(DATA_KEY, "[]")
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return [], "ledger data is not a JSON text of a sane size"
    try:
        raw = json.loads(text)
    except ValueError:
        return [], "ledger data is not valid JSON"
    if not isinstance(raw, list):
        return [], "ledger data is not a list"
    out = []
    for item in raw:
        if not isinstance(item, dict):
            return [], "a ledger entry is not an object"
        t = item.get("t")
        if isinstance(t, bool) or not isinstance(t, int | float) or t != t:
            return [], "a ledger entry has no valid time"
        out.append(Entry(float(t), str(item.get("namespace", "")), str(item.get("pod", "")), str(item.get("uid", ""))))
    return out, None


def render(entries: Sequence[Entry]) -> dict[str, str]:
    """The ConfigMap ``data`` for ``entries`` (oldest first)."""
    return {DATA_KEY: json.dumps([{"t": round(e.t, 3), "namespace": e.namespace, "pod": e.pod, "uid": e.uid}
                                  for e in entries], separators=(",", ":"))}


def add(entries: Sequence[Entry], entry: Entry, *, wall_now: float, window_s: float) -> list[Entry]:
    """``entries`` plus ``entry``, without entries older than the window, at most :data:`MAX_ENTRIES` (newest)."""
    kept = [e for e in entries if wall_now - e.t < window_s and e.uid != entry.uid]
    kept.append(entry)
    kept.sort(key=lambda e: e.t)
    return kept[-MAX_ENTRIES:]


def without(entries: Sequence[Entry], uid: str) -> list[Entry]:
    """``entries`` without the one for pod ``uid`` (an intent whose removal the API said was not applied)."""
    return [e for e in entries if e.uid != uid]


def deletions(entries: Sequence[Entry], *, now: float, wall_now: float, window_s: float,
              ) -> list[tuple[float, str, str]]:
    """(monotonic time, namespace, pod UID) of each ledger entry that still counts against the budget: inside
    ``window_s`` (wall clock: ``wall_now`` minus its time, never negative), whatever namespace it names — the ledger
    is this release's own (shards have their own, by leaseName), and a namespace opted out and in again across a
    restart must not free the cluster budget. ``now``: monotonic seconds."""
    out = []
    for e in entries:
        age = max(0.0, wall_now - e.t)
        if age < window_s:
            out.append((now - age, e.namespace, e.uid))
    return out
