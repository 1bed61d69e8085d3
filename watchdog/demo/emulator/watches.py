"""Watches and paged lists as the real API server serves them, for the emulator (an emulator, not a cluster).

kmock 0.8 streams every watch from "now" (all current objects as ADDED, then what happens next) and ignores
``resourceVersion``, ``allowWatchBookmarks`` and ``limit``/``continue``. Here, per resource, an
:class:`EventLog` replaces kmock's event bus: every event gets a cluster-wide increasing resourceVersion
(deletions too), and the last :data:`HISTORY` events are kept, so that

- a watch from ``resourceVersion=N`` replays the events after N, then follows; N older than the kept history
  (or than :meth:`EventLog.compact`, the emulated etcd compaction) is answered with the API server's
  ``ERROR`` event, ``410 Expired``; no ``resourceVersion`` (or ``0``): the current objects as ADDED first;
- a watch with a label or field selector sees an object that stops matching as DELETED and one that starts
  matching as ADDED (the API server's watch cache does the same);
- ``allowWatchBookmarks=true``: a BOOKMARK with the current resourceVersion whenever the watch has been idle
  for ``bookmark_interval_s`` (the real API server: about once a minute) and when ``timeoutSeconds`` ends;
- a LIST with ``limit`` is paged (``continue`` token), each page reporting the first page's resourceVersion;
  unlike the real API server the later pages read the current objects, not a snapshot.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

HISTORY = 10_000  # events kept per resource (the real API server keeps about 5 minutes' worth in etcd)
Match = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Entry:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    prev: dict[str, Any] | None  # the object's state before this event, if known


class EventLog:
    """One resource's events, each with its resourceVersion (``stamp``: the object's own if newer than every
    event so far, else a new one), in order; kmock's code calls :meth:`put` where it fed its bus."""

    def __init__(self, stamp: Callable[[str | None], int], limit: int = HISTORY) -> None:
        self.stamp, self.limit = stamp, limit
        self.entries: collections.deque[Entry] = collections.deque()
        self.first_seq = 0  # sequence number of entries[0]
        self.floor = 0  # a watch from a resourceVersion below this one is answered 410 (history dropped)
        self.changed = asyncio.Condition()
        self._last: dict[tuple[str | None, str | None], dict[str, Any]] = {}

    @property
    def end(self) -> int:
        return self.first_seq + len(self.entries)

    async def put(self, *events: dict[str, Any]) -> None:
        for event in events:
            self._append(event)
        async with self.changed:
            self.changed.notify_all()

    def _append(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        rv = self.stamp(meta.get("resourceVersion"))
        if meta.get("resourceVersion") != str(rv):
            obj = {**obj, "metadata": {**meta, "resourceVersion": str(rv)}}
        key = (meta.get("namespace"), meta.get("name"))
        prev = self._last.pop(key, None) if event["type"] == "DELETED" else self._last.get(key)
        if event["type"] != "DELETED":
            self._last[key] = obj
        self.entries.append(Entry(rv, event["type"], obj, prev))
        if len(self.entries) > self.limit:
            self.floor = self.entries.popleft().rv
            self.first_seq += 1

    def compact(self, rv: int) -> None:
        """Forget every event up to ``rv`` (etcd compaction): watches from older resourceVersions get 410."""
        while self.entries and self.entries[0].rv <= rv:
            self.entries.popleft()
            self.first_seq += 1
        self.floor = max(self.floor, rv)

    def seq_after(self, rv: int) -> int | None:
        """The sequence number of the first event newer than ``rv``; None when events after it were dropped."""
        if rv < self.floor:
            return None
        seq = self.end
        while seq > self.first_seq and self.entries[seq - 1 - self.first_seq].rv > rv:
            seq -= 1
        return seq


def view(entry: Entry, match: Match) -> dict[str, Any] | None:
    """What a watch with filter ``match`` sees of ``entry`` (None: nothing)."""
    if entry.type == "DELETED":
        return {"type": "DELETED", "object": entry.obj} if match(entry.obj) else None
    was = entry.type == "MODIFIED" and entry.prev is not None and match(entry.prev)
    if match(entry.obj):
        return {"type": "MODIFIED" if was else "ADDED", "object": entry.obj}
    return {"type": "DELETED", "object": entry.obj} if was else None  # it left the selector


def expired(rv: str, oldest: int) -> dict[str, Any]:
    """The API server's answer to a watch from a compacted resourceVersion (in a 200 stream)."""
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                        "message": f"too old resource version: {rv} ({oldest})",
                                        "reason": "Expired", "code": 410}}


@dataclass
class WatchSpec:
    log: EventLog
    match: Match
    start: int  # sequence number to stream from
    head: Callable[[], int]  # the cluster-wide resourceVersion of the last event
    bookmark: dict[str, Any] | None  # {"kind", "apiVersion"} when bookmarks are allowed
    interval_s: float
    deadline: float | None  # loop time the watch ends (timeoutSeconds)


async def stream(spec: WatchSpec) -> AsyncIterator[dict[str, Any]]:
    """The events of ``spec.log`` from ``spec.start`` on, filtered, with bookmarks, until the deadline."""
    loop = asyncio.get_running_loop()
    seq, log = spec.start, spec.log
    next_bookmark = loop.time() + spec.interval_s
    while True:
        while seq < log.end:
            if seq < log.first_seq:  # this watcher fell behind the kept history
                yield expired(str(log.floor), log.floor)
                return
            entry = log.entries[seq - log.first_seq]
            seq += 1
            shown = view(entry, spec.match)
            if shown is not None:
                yield shown
                next_bookmark = loop.time() + spec.interval_s
        now = loop.time()
        over = spec.deadline is not None and now >= spec.deadline
        if spec.bookmark is not None and (over or now >= next_bookmark):
            yield {"type": "BOOKMARK", "object": {**spec.bookmark, "metadata": {"resourceVersion": str(spec.head())}}}
            next_bookmark = loop.time() + spec.interval_s
        if over:
            return
        wait = [t - loop.time() for t in (spec.deadline, next_bookmark if spec.bookmark else None) if t is not None]
        async with log.changed:
            if seq == log.end:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(log.changed.wait(), max(0.0, min(wait)) if wait else None)


def page(items: list[dict[str, Any]], rv: str, limit: str | None, token: str | None) -> tuple[list[dict[str, Any]],
                                                                                                dict[str, Any]]:
    """One page of a LIST (items ordered by namespace and name) and its list metadata."""
    meta: dict[str, Any] = {"resourceVersion": rv}
    if not limit and not token:
        return items, meta
    start = ""
    if token:
        state = json.loads(base64.urlsafe_b64decode(token.encode()))
        start, meta["resourceVersion"] = state["start"], state["rv"]

    def key(i: dict[str, Any]) -> str:
        m = i.get("metadata") or {}
        return f"{m.get('namespace') or ''}/{m.get('name') or ''}"

    rest = sorted((i for i in items if key(i) > start), key=key)
    size = int(limit) if limit else len(rest)
    chunk, more = rest[:size], rest[size:]
    if more and chunk:
        state = {"start": key(chunk[-1]), "rv": meta["resourceVersion"]}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
        meta["remainingItemCount"] = len(more)
    return chunk, meta
