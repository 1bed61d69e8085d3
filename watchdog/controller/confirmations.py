"""The confirmation reads before a removal: a pod read afresh by its target's source (``Source.confirm``: the pod's
own ``/metrics``, never Prometheus), bounded in the work a tenant's pods can cost.

- *Once per pod per cycle*: every stalled engine series of a pod is judged from the one read (a pod with 64 frozen
  engines whose read hangs costs one read, not 64).
- *A failed read backs the pod off*: it is not read in the next cycle, nor (doubled after each failure in a row)
  in the next 2, at most :data:`BACKOFF_MAX_CYCLES`; nothing is removed meanwhile.
- *Each tenant's reads have a time budget per cycle* (``budget_s``, the scrape deadline): once a tenant's reads of
  this cycle took that long, its further pods wait for the next cycle, so one tenant's hanging pods never hold back
  another tenant's confirmations.

A read that is not made is *unknown*: the caller removes nothing and tries again next cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.adapters.metrics import Metrics
from watchdog.controller.ports import Clock, Source
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import ParseResult

#: The cycles a pod whose confirmation read failed is not read in: 1, doubled after each failure in a row, at most this.
BACKOFF_MAX_CYCLES = 4


class Confirmations:
    """The confirmation reads (the remediator's before a removal, the cycle's of a stall read from Prometheus), by
    ``sources`` (target name -> its source); ``budget_s``: each tenant's read time per cycle; ``clock``: monotonic
    seconds."""

    def __init__(self, sources: Mapping[str, Source], metrics: Metrics, clock: Clock, *, budget_s: float) -> None:
        self.sources, self.metrics, self.clock, self.budget_s = sources, metrics, clock, budget_s
        self._cycle = 0
        self._read: dict[str, ParseResult | str] = {}  # pod UID -> this cycle's read (or why there is none)
        self._spent: dict[str, float] = {}  # tenant -> seconds its reads took this cycle
        self._failed: dict[str, tuple[int, int]] = {}  # pod UID -> (failed reads in a row, first cycle read again)

    def begin_cycle(self) -> None:
        """A new cycle: every pod may be read once more (unless backed off), every tenant's budget is whole."""
        self._read, self._spent, self._cycle = {}, {}, self._cycle + 1

    def forget_pods(self, live_uids: set[str]) -> None:
        self._failed = {uid: v for uid, v in self._failed.items() if uid in live_uids}

    def read(self, target: WatchedPod) -> ParseResult | str:
        """This cycle's read of ``target`` (made on the first call of the cycle), or why there is none."""
        if target.uid not in self._read:
            self._read[target.uid] = self._make(target)
        return self._read[target.uid]

    def _make(self, target: WatchedPod) -> ParseResult | str:
        failed, again = self._failed.get(target.uid, (0, self._cycle))
        if self._cycle < again:
            return (f"its confirmation read failed ({failed} in a row): read again in {again - self._cycle} "
                    "cycle(s) (backoff)")
        spent = self._spent.get(target.tenant, 0.0)
        if spent >= self.budget_s:
            return (f"the confirmation reads of tenant {target.tenant} took {spent:.1f} s this cycle (at most "
                    f"{self.budget_s:g} s per tenant): read next cycle")
        now = self.clock()
        reading = self.sources[target.target_name].confirm(target)
        self._spent[target.tenant] = spent + max(0.0, self.clock() - now)
        self.metrics.scrapes.labels(reading.outcome).inc()
        if reading.parsed is not None:
            self._failed.pop(target.uid, None)
            return reading.parsed
        self._failed[target.uid] = (failed + 1, self._cycle + 1 + min(2 ** failed, BACKOFF_MAX_CYCLES))
        return f"{reading.what or 'the read'} failed ({reading.outcome}): {reading.detail}"
