"""The evidence kept before a deletion (issue 17): what an engineer asks for once the pod is gone. Pure: the
caller passes the times and the log bytes; :mod:`watchdog.controller.evidence` reads the log and writes the record.

- The signal history of the episode: :func:`remember` keeps the last :data:`HISTORY_LEN` samples of one engine
  series, only while it is suspect, stalled or unknown inside such an episode; idle, paused or progressing drops
  it (None). A healthy fleet holds no history at all.
- The engine container's log tail: :func:`log_tail` keeps the newest whole lines within a byte cap, decoded with
  replacement characters (tenant text: the JSON log escapes its control characters).
- :func:`build_record`: one dict (the ``evidence`` field of one WARNING log line), bounded: the history by
  :data:`HISTORY_LEN`, the engine key by ``MAX_ENGINE_KEY``, the log tail by its byte cap.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from watchdog.core.confirm import known, signal_name
from watchdog.core.detector import Sample, Verdict
from watchdog.core.events import MAX_ENGINE_KEY, utc_stamp
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.profiles import Selector
from watchdog.core.vocab import EPISODE_STATES

#: Samples kept per engine series in an episode (the newest win): at the default 15 s interval, 8 minutes.
HISTORY_LEN = 32
#: The verdicts that open or continue an episode's history; any other state (idle, paused, progressing) ends it.


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One sample of the history: ``t`` (monotonic s), the verdict's state, the gauges, the progress values
    (known, in the profile's order) and their ``names`` (one tuple shared by every entry of a profile: a history
    of 10,000 engines at start-up, when every busy engine is suspect once, holds no copy of them)."""

    t: float
    state: str
    running: float | None
    waiting: float | None
    values: tuple[float | None, ...]
    names: tuple[str, ...]

    @property
    def progress(self) -> tuple[tuple[str, float | None], ...]:
        """Each progress value by name."""
        return tuple(zip(self.names, self.values, strict=True))


@lru_cache(maxsize=64)
def _names(signals: tuple[Selector, ...], count: int) -> tuple[str, ...]:
    """The names of ``count`` progress values (shared by every entry of every history of a profile)."""
    return tuple(signal_name(signals, i) for i in range(count))


def remember(history: tuple[HistoryEntry, ...] | None, sample: Sample, verdict: Verdict,
             signals: tuple[Selector, ...]) -> tuple[HistoryEntry, ...] | None:
    """The history after ``sample`` (judged ``verdict``): opened by a suspect or stalled verdict, continued by
    those and by unknown ones (a failed scrape inside the episode is evidence too), dropped (None) by any other;
    the newest :data:`HISTORY_LEN` samples. A tuple: one small object per series (a deque's first block alone is
    ~600 bytes), copied whole at each sample (at most 32 references) and never changed once handed out."""
    if verdict.state not in EPISODE_STATES and (history is None or verdict.state != "unknown"):
        return None
    entry = HistoryEntry(sample.t, verdict.state, known(sample.running), known(sample.waiting),
                  tuple(map(known, sample.progress)), _names(signals, len(sample.progress)))
    if history is None:
        return (entry,)
    return (*history[-(HISTORY_LEN - 1):], entry)


def snapshot_values(snap: EngineSnapshot | None, signals: tuple[Selector, ...]) -> dict[str, Any] | None:
    """A scrape's values of one series: running, waiting, paused and each progress signal by name."""
    if snap is None:
        return None
    return {"running": known(snap.running), "waiting": known(snap.waiting), "paused": known(snap.paused),
            "progress": {signal_name(signals, i): known(v) for i, v in enumerate(snap.progress)}}


def log_tail(raw: bytes, max_bytes: int) -> tuple[str, bool]:
    """The newest whole lines of ``raw`` within ``max_bytes`` bytes, decoded (invalid UTF-8 replaced); and whether
    anything was cut. A single line longer than the cap keeps its last ``max_bytes`` bytes."""
    cut = len(raw) > max_bytes
    if cut:
        tail = raw[-max_bytes:]
        newline = tail.find(b"\n")
        raw = tail[newline + 1:] if 0 <= newline < len(tail) - 1 else tail
    return raw.decode("utf-8", "replace"), cut


def evidence_id(uid: str, wall_now: float) -> str:
    """``<first 8 of the pod UID>-<Unix seconds>``: unique per deletion (one per pod), greppable."""
    return f"{uid[:8]}-{int(wall_now)}"


def pointer(eid: str) -> str:
    """What the Event says about it (short: the Event keeps its head)."""
    return f"evidence: {eid} in the watchdog log"


def build_record(eid: str, *, pod: str, uid: str, engine: str, outcome: str, verdict: Verdict,
                 history: Iterable[HistoryEntry], final: dict[str, Any] | None, final_from: str, log: str,
                 log_cut: bool = False, now: float, wall_now: float, window_source: str = "global") -> dict[str, Any]:
    """The evidence of one decision: ``outcome`` (delete, evict, dry_run), the verdict's facts, the ``history``
    with each sample's age (s before ``now``, monotonic) and UTC time (``wall_now`` is the same instant), the
    ``final`` scrape's values (``final_from``: confirmation, or cycle in dry-run) and the ``log`` tail text (or
    why it is unavailable; ``log_cut``: older lines were dropped to the byte cap); ``window_source``: where the
    verdict's window came from (global, target, annotation)."""
    if len(engine) > MAX_ENGINE_KEY:
        engine = engine[: MAX_ENGINE_KEY - 3] + "..."

    def at(t: float) -> str:
        return utc_stamp(dt.datetime.fromtimestamp(wall_now - (now - t), dt.UTC))

    return {
        "id": eid, "pod": pod, "uid": uid, "engine": engine, "outcome": outcome, "dry_run": outcome == "dry_run",
        "verdict": {"state": verdict.state, "stalled_for_s": round(verdict.stalled_for_s, 1),
                    "running": verdict.running, "waiting": verdict.waiting, "busy_samples": verdict.busy_samples,
                    "window_s": verdict.window_s, "window_source": window_source, "frozen": dict(verdict.frozen)},
        "history": [{"age_s": round(now - e.t, 1), "at": at(e.t), "state": e.state, "running": e.running,
                     "waiting": e.waiting, "progress": dict(e.progress)} for e in list(history)[-HISTORY_LEN:]],
        "final": final, "final_from": final_from, "log": log, "log_cut": log_cut,
    }
