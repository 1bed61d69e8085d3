"""What counts as evidence, as busy and as progress: the one rule the detector folds over samples and the
remediator re-applies to its confirmation scrape right before a deletion. Pure.

A value is *known* only when it is a finite, non-negative number; NaN, infinities, negative values and missing
metrics are all *unknown*, never evidence. Two known values of a counter that differ mean progress (a drop is
a counter reset: an engine restart, also not a stall); an unknown value never moves anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

#: The signal fields whose rise counts as forward progress. Tests may narrow it (the long-prefill case).
PROGRESS_COUNTERS: tuple[str, ...] = ("generation_tokens", "prompt_tokens", "heartbeat")


class Signals(Protocol):
    """One reading of an engine series (a detector Sample or a parsed EngineSnapshot)."""

    @property
    def running(self) -> float | None: ...
    @property
    def waiting(self) -> float | None: ...
    @property
    def generation_tokens(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> float | None: ...
    @property
    def heartbeat(self) -> float | None: ...


def known(value: float | None) -> float | None:
    """``value`` as evidence: None unless a finite, non-negative number."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def missing_evidence(signals: Signals, counters: Iterable[str] = PROGRESS_COUNTERS) -> str | None:
    """Why ``signals`` is no evidence at all (running unknown, or every progress counter unknown), else None."""
    if known(signals.running) is None:
        return "running"
    if all(known(getattr(signals, name)) is None for name in counters):
        return "every progress counter"
    return None


def load(signals: Signals, count_waiting: bool) -> float | None:
    """Requests keeping the engine busy: running (plus waiting with ``count_waiting``); None when unknown."""
    running = known(signals.running)
    if running is None:
        return None
    return running + ((known(signals.waiting) or 0.0) if count_waiting else 0.0)


def moved(before: Signals, now: Signals, counters: Iterable[str] = PROGRESS_COUNTERS) -> str | None:
    """The first progress counter known in both readings whose value differs, as a phrase; else None."""
    for name in counters:
        a, b = known(getattr(before, name)), known(getattr(now, name))
        if a is not None and b is not None and a != b:
            return f"{name} moved from {a:g} to {b:g}"
    return None


def not_confirmed(before: Signals, now: Signals, count_waiting: bool,
                  counters: Iterable[str] = PROGRESS_COUNTERS) -> str | None:
    """Why the confirmation reading ``now`` does NOT confirm the stall seen on ``before``, or None when it does:
    no evidence now (unknown is never evidence), the engine went idle, or a progress counter moved."""
    counters = tuple(counters)
    missing = missing_evidence(now, counters)
    if missing is not None:
        return f"no evidence: {missing} missing or invalid"
    busy = load(now, count_waiting)
    if busy is not None and busy <= 0:
        return "engine went idle"
    return moved(before, now, counters)
