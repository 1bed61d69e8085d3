"""What the cycle remembers between cycles: one :class:`PodRecord` per pod UID (restart count, when this
process first watched it, how long its last scrape took, and one :class:`EngineState` per engine series).

Bounds: records exist only for pods discovered this cycle (the rest are dropped); a series that stopped being
exported is dropped after one window without it (``drop_vanished``), and a pod never keeps more than
:data:`MAX_SERIES_PER_POD` series (the newest win; the rest are dropped and counted).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.parsing import LIMITS, EngineSnapshot

MAX_SERIES_PER_POD = LIMITS.series  # the same cap as per scrape body (one rule, core/parsing.py)


@dataclass
class EngineState:
    """The detector, latest snapshot and verdict of one engine series. ``last_seen``: monotonic time the
    series was last in a successfully parsed body; ``in_episode``: a stall episode is open (it closes only when
    the detector sees the engine idle or progressing — a failed scrape in between does not end it)."""

    detector: DetectorState
    last_seen: float
    last: EngineSnapshot | None = None
    verdict: Verdict | None = None
    in_episode: bool = False


@dataclass
class PodRecord:
    """One pod UID: the restart count the engine states belong to, when this process first watched it
    (monotonic), its last scrape's duration (slowest pods are scraped first) and its engine series."""

    restart_count: int
    first_seen: float
    scrape_seconds: float = 0.0
    engines: dict[str, EngineState] = field(default_factory=dict)

    def drop_vanished(self, now: float, window_s: float, present: Collection[str]) -> list[str]:
        """Forget series absent from every successful scrape for ``window_s`` or longer (``present``: the keys in
        this scrape's body, never dropped); return their keys."""
        gone = [key for key, e in self.engines.items() if key not in present and now - e.last_seen >= window_s]
        for key in gone:
            del self.engines[key]
        return gone

    def cap_series(self) -> int:
        """Keep at most :data:`MAX_SERIES_PER_POD` series (the most recently seen); return how many were dropped."""
        extra = len(self.engines) - MAX_SERIES_PER_POD
        if extra <= 0:
            return 0
        for key in sorted(self.engines, key=lambda k: self.engines[k].last_seen)[:extra]:
            del self.engines[key]
        return extra
