"""What counts as evidence, as busy, as paused and as progress: the one rule the detector folds over samples and
the remediator re-applies to its confirmation scrape right before a deletion. Pure.

A value is *known* only when it is a finite, non-negative number; NaN, infinities, negative values and missing
metrics are all *unknown*, never evidence. Two known values of a progress signal that differ mean progress (a
counter that drops was reset: an engine restart, also not a stall; a gauge that changes in either direction
moved); an unknown value never moves anything. A known ``paused`` value above 0 means the engine is paused or
sleeping on purpose: never a stall.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from watchdog.core.profiles import Selector


class Signals(Protocol):
    """One reading of an engine series (a detector Sample or a parsed EngineSnapshot)."""

    @property
    def running(self) -> float | None: ...
    @property
    def waiting(self) -> float | None: ...
    @property
    def progress(self) -> tuple[float | None, ...]: ...
    @property
    def paused(self) -> float | None: ...


def known(value: float | None) -> float | None:
    """``value`` as evidence: None unless a finite, non-negative number."""
    if value is None:
        return None
    value = float(value)
    return value if 0 <= value < math.inf else None  # NaN compares false: unknown too


def known_all(values: Sequence[float | None]) -> list[float | None]:
    """:func:`known` of each of ``values`` (one pass, the same rule written inline: the detector's per-sample hot
    path)."""
    return [float(v) if v is not None and 0 <= v < math.inf else None for v in values]


def missing_evidence(signals: Signals) -> str | None:
    """Why ``signals`` is no evidence at all (running unknown, or every progress signal unknown), else None."""
    return missing_among(known(signals.running), known_all(signals.progress))


def missing_among(running: float | None, progress: Sequence[float | None]) -> str | None:
    """:func:`missing_evidence` of values already made :func:`known`."""
    if running is None:
        return "running"
    if progress.count(None) == len(progress):  # every one None (a generator per sample cost ~1.5 us)
        return "every progress signal"
    return None


def live_evidence(signals: Signals, selectors: Sequence[Selector]) -> bool:
    """True when a progress signal that moves while a request runs (not completion-only) is known."""
    return any(known(value) is not None and not (i < len(selectors) and selectors[i].completion_only)
               for i, value in enumerate(signals.progress))


def is_paused(signals: Signals) -> bool:
    """True when the engine says it is paused or sleeping (a known ``paused`` value above 0)."""
    return (known(signals.paused) or 0.0) > 0


def load(signals: Signals, count_waiting: bool) -> float | None:
    """Requests keeping the engine busy: running (plus waiting with ``count_waiting``); None when unknown."""
    running = known(signals.running)
    if running is None:
        return None
    return running + ((known(signals.waiting) or 0.0) if count_waiting else 0.0)


def signal_name(selectors: Sequence[Selector], index: int) -> str:
    """The name of progress signal ``index`` (``progress[i]`` when ``selectors`` is shorter)."""
    return str(selectors[index]) if index < len(selectors) else f"progress[{index}]"


def moved(before: Signals, now: Signals, selectors: Sequence[Selector] = ()) -> str | None:
    """The first progress signal known in both readings whose value differs, as a phrase; else None."""
    for index, (a, b) in enumerate(zip(before.progress, now.progress, strict=False)):
        a, b = known(a), known(b)
        if a is not None and b is not None and a != b:
            return f"{signal_name(selectors, index)} moved from {a:g} to {b:g}"
    return None


def no_evidence(now: Signals, selectors: Sequence[Selector] = (), completion_only_allowed: bool = False,
                ) -> str | None:
    """Why the confirmation reading ``now`` is no evidence at all (unknown is never evidence; neither are
    completion-only signals alone unless allowed), or None when it is."""
    missing = missing_evidence(now)
    if missing is not None:
        return f"no evidence: {missing} missing or invalid"
    if not completion_only_allowed and not live_evidence(now, selectors):
        return "no evidence: only completion-only progress signals"
    return None


def not_confirmed(before: Signals, now: Signals, count_waiting: bool, selectors: Sequence[Selector] = (),
                  ) -> str | None:
    """Why the confirmation reading ``now``, evidence by :func:`no_evidence` (asked first, once), does NOT confirm
    the stall seen on ``before``, or None when it does: the engine went idle or paused, or a progress signal
    moved."""
    if is_paused(now):
        return "engine paused or sleeping"
    busy = load(now, count_waiting)
    if busy is not None and busy <= 0:
        return "engine went idle"
    return moved(before, now, selectors)
