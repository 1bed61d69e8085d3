"""The deletion ledger: this watchdog's recent removals, kept in one small ConfigMap it owns (why, and why never
Events: docs/safety.md "Deletion budgets"). Pure: encoding, trimming and the budget arithmetic;
:mod:`watchdog.controller.ledger` does the I/O (and writes each entry AHEAD of its removal).

The ConfigMap's ``data["deletions"]`` is a JSON list of ``{"t": unix seconds, "namespace", "pod", "uid"}``,
oldest first, trimmed to the budget window on every write. It holds at most :data:`MAX_ENTRIES` entries, the
bound of the settings ``maxDeletions`` and ``maxDeletionsPerNamespace`` (watchdog/config/settings.py): every entry
the budgets can need fits, and an entry still inside the window is never cut (:class:`LedgerFull` instead).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DATA_KEY = "deletions"
#: The most entries the ledger holds, and so the maximum of maxDeletions (the budgets count these entries). One
#: entry of the longest namespace (63), pod name (253) and UID (36) renders in 406 bytes: 1,000 take at most
#: ~400 KB, within MAX_TEXT and the API server's 1 MiB object limit.
MAX_ENTRIES = 1000
MAX_TEXT = 512 * 1024  # a ledger larger than this is not parsed (someone else wrote it)


class LedgerFull(ValueError):
    """Adding an entry would make the ledger hold more than :data:`MAX_ENTRIES` inside the window: cutting one
    would undercount the budget after a restart, so the removal is not recorded (and so not sent)."""


@dataclass(frozen=True)
class LedgerEntry:
    """One deletion: wall-clock time (Unix seconds), namespace, pod name and UID."""

    t: float
    namespace: str
    pod: str
    uid: str


def parse(data: Mapping[str, Any] | None) -> tuple[list[LedgerEntry], str | None]:
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
        out.append(LedgerEntry(float(t), str(item.get("namespace", "")), str(item.get("pod", "")),
                               str(item.get("uid", ""))))
    return out, None


def render(entries: Sequence[LedgerEntry]) -> dict[str, str]:
    """The ConfigMap ``data`` for ``entries`` (oldest first)."""
    return {DATA_KEY: json.dumps([{"t": round(e.t, 3), "namespace": e.namespace, "pod": e.pod, "uid": e.uid}
                                  for e in entries], separators=(",", ":"))}


def add(entries: Sequence[LedgerEntry], entry: LedgerEntry, *, wall_now: float, window_s: float) -> list[LedgerEntry]:
    """``entries`` plus ``entry``, without entries older than the window; raises :class:`LedgerFull` when more
    than :data:`MAX_ENTRIES` would remain (never cut: each one still counts against the budget)."""
    kept = [e for e in entries if wall_now - e.t < window_s and e.uid != entry.uid]
    if len(kept) >= MAX_ENTRIES:
        raise LedgerFull(f"the deletion ledger already holds {len(kept)} removals inside the {window_s:g} s window "
                         f"(at most {MAX_ENTRIES}, the maximum of maxDeletions)")
    kept.append(entry)
    kept.sort(key=lambda e: e.t)
    return kept


def without(entries: Sequence[LedgerEntry], uid: str) -> list[LedgerEntry]:
    """``entries`` without the one for pod ``uid`` (an intent whose removal the API said was not applied)."""
    return [e for e in entries if e.uid != uid]


def deletions(entries: Sequence[LedgerEntry], *, now: float, wall_now: float, window_s: float,
              sent_within_s: float = 0.0) -> list[tuple[float, str, str]]:
    """(monotonic time, namespace, pod UID) of each ledger entry that still counts against the budget: inside
    ``window_s`` (wall clock: ``wall_now`` minus its time, never negative), whatever namespace it names — the ledger
    is this release's own (shards have their own, by leaseName), and a namespace opted out and in again across a
    restart must not free the cluster budget. ``now``: monotonic seconds. An entry is written ahead of its send, so
    it counts from ``sent_within_s`` (the send's timeout) after its stamp: the latest its removal can have been
    applied (counted from the stamp, a slow DELETE applied 6 s after it let a third removal in 144 s of a 150 s
    window, sim seed 6417)."""
    out = []
    for e in entries:
        age = max(0.0, wall_now - e.t - sent_within_s)
        if age < window_s:
            out.append((now - age, e.namespace, e.uid))
    return out
