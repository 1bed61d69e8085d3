"""Whether a source can be read at all: the one rule behind ``vllm_watchdog_source_up``, /readyz's source reason
and the chart's ``helm test``. Pure.

A source (``prometheus``, or ``scrape``: scraping as a whole, every scraped target together) FAILED a cycle when it
had pods due and read none of them: every read of that cycle failed to reach what it reads. For Prometheus that is
every query failing (outcome ``prometheus_error``: unreachable, HTTP error, timeout, ``status: error``); an answer
without a pod's series (``prometheus_unknown``) is Prometheus answering, not failing. For scraping it is every scrape
failing at the transport (:data:`TRANSPORT_FAILURES`: timeout, refused, any other connection failure); a pod that
answered with an HTTP error, an oversized or undecodable body was reached. So one tenant's pods all down while any
other pod answered is not a failed cycle. With no pod due, the source's probe is the cycle's one read (Prometheus:
one constant query; :meth:`watchdog.controller.ports.Source.probe`); a source with nothing to probe (scraping)
has no evidence either way then (the count stays).

After :data:`FAILED_CYCLES` failed cycles in a row the source is down, until one cycle reads anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from watchdog.core.vocab import ScrapeOutcome

#: Consecutive failed cycles after which a source is down (one constant: 3 x scrapeIntervalSeconds, 45 s by default).
FAILED_CYCLES = 3

#: The reads that reached nothing: the pod's /metrics not reached, or Prometheus' queries failed.
TRANSPORT_FAILURES: frozenset[ScrapeOutcome] = frozenset({"timeout", "refused", "connection", "prometheus_error"})


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One source's health after the cycles so far: ``failed_cycles`` in a row, and ``why``: the last failed
    cycle's account (how many reads failed and the first failure, one line; "" after a cycle that read)."""

    failed_cycles: int = 0
    why: str = ""

    @property
    def up(self) -> bool:
        return self.failed_cycles < FAILED_CYCLES

    def after(self, reads: Iterable[tuple[str, str]]) -> SourceHealth:
        """The health after one more cycle: ``reads`` is (outcome, one line of what failed) per pod due."""
        due, first = 0, ""
        for outcome, detail in reads:
            due += 1
            if outcome not in TRANSPORT_FAILURES:
                return SourceHealth()  # one pod read: the source works
            first = first or detail
        if due == 0:
            return self  # nothing due: no evidence either way
        return SourceHealth(self.failed_cycles + 1, f"all {due} reads of the last cycle failed, first: {first}")
