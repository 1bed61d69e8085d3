"""``source: scrape``: one pod's ``/metrics`` fetched, then parsed at once, as a
:class:`~watchdog.controller.reading.Reading`.

:meth:`ScrapeSource.start` runs :meth:`ScrapeSource.read` for every due pod of the cycle as a coroutine on the
scraper's event loop (the fan-out: :mod:`watchdog.controller.fanout`; the parse runs there too, as soon as the body
arrived, so no more bodies are alive than scrapes in flight); :meth:`ScrapeSource.confirm` is the synchronous read
(the confirmation before a deletion). A reading's ``seconds`` (the fan-out's order and size next cycle) is the time
from the start of its fetch to the end of its parse, never the time it waited for its turn; its ``t`` the moment
that ended, on ``clock`` (the sample's time: never before the body it reads arrived, so the stall clock never starts
before the read that showed progress; docs in :mod:`watchdog.controller.cycle`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from watchdog.adapters.logs import facts
from watchdog.adapters.metrics import Metrics
from watchdog.adapters.scrape_errors import ScrapeError
from watchdog.controller.fanout import FULL_EVERY, Fanout
from watchdog.controller.ports import AsyncFetcher, Clock
from watchdog.controller.reading import Reading
from watchdog.controller.state import PodRecord
from watchdog.core.lines import scrape_url
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import Profile

log = logging.getLogger(__name__)


class ScrapeSource:
    """Fetch with ``scraper`` (on its loop, ``fanout`` deciding how many at once and in which order), parse with the
    target's profile."""

    where = "scrape (the pods' /metrics)"

    def __init__(self, scraper: AsyncFetcher, fanout: Fanout, profiles: Mapping[str, Profile], metrics: Metrics,
                 clock: Clock = time.monotonic) -> None:
        self.scraper, self.fanout, self.profiles, self.metrics, self.clock = scraper, fanout, profiles, metrics, clock

    def start(self, pods: Sequence[tuple[WatchedPod, PodRecord]]) -> Callable[[], Mapping[str, Reading]]:
        return self.fanout.gather(pods, self.read, self.scraper).result

    def confirm(self, pod: WatchedPod) -> Reading:
        try:
            return self._parse(pod, self.scraper.fetch(self._url(pod)))
        except ScrapeError as exc:
            return self._failed(pod, exc)

    def probe(self) -> tuple[str, str] | None:
        """Nothing: without a pod there is no /metrics to reach (no evidence either way)."""
        return None

    def close(self) -> None:
        self.scraper.close()

    async def read(self, pod: WatchedPod, record: PodRecord, deadline_s: float | None) -> Reading:
        """One pod's reading on the loop; ``deadline_s``: this cycle's shortened deadline, or None."""
        start = time.perf_counter()
        try:  # the body is parsed as soon as it arrived and freed with the parse
            url = self._url(pod)
            reading = self._parse(pod, await (self.scraper.fetch_async(url) if deadline_s is None
                                              else self.scraper.fetch_async(url, deadline_s=deadline_s)))
        except ScrapeError as exc:
            reading = self._failed(pod, exc, record.timeouts if deadline_s is not None else None)
        except Exception as exc:  # one pod's unexpected trouble is its own unknown, never the others' (one batch)
            log.exception("scrape of %s failed unexpectedly", pod.ref, extra=facts(pod))
            reading = self._failed(pod, ScrapeError("connection", f"scrape failed unexpectedly: "
                                                                  f"{type(exc).__name__}: {exc}"[:300]))
        return replace(reading, t=self.clock(), seconds=time.perf_counter() - start)

    def _url(self, pod: WatchedPod) -> str:
        """The pod's /metrics asking for its profile's series only (:func:`watchdog.core.lines.scrape_url`)."""
        return scrape_url(pod.url, self.profiles[pod.target_name])

    def _failed(self, pod: WatchedPod, exc: ScrapeError, shortened_after: int | None = None) -> Reading:
        """``shortened_after``: the timeouts in a row that shortened this scrape's deadline (None: the full one)."""
        log.debug("scrape %s of %s failed: %s", pod.url, pod.ref, exc,
                  extra=facts(pod, result=exc.reason, reason=str(exc)))
        detail = str(exc)
        if exc.reason == "timeout" and shortened_after is not None:
            detail += (f" (a shortened deadline: its last {shortened_after} scrapes timed out; every "
                       f"{FULL_EVERY}th cycle it gets the full deadline)")
        return Reading(exc.reason, detail=detail, what=f"scrape of {pod.url}")

    def _parse(self, pod: WatchedPod, body: bytes) -> Reading:
        parsed = parse_exposition(body, self.profiles[pod.target_name])
        if parsed.overrun:
            return self._overrun(pod, parsed.overrun)
        if parsed.dropped_series:
            self.metrics.series_dropped.inc(parsed.dropped_series)
        return Reading("ok", parsed)

    def _overrun(self, pod: WatchedPod, overrun: str) -> Reading:
        """Over the parse bounds: unknown, never evidence (and no partial result)."""
        log.info("pod %s: %s: its engines are unknown this cycle", pod.ref, overrun,
                 extra=facts(pod, result="parse", reason=overrun))
        return Reading("parse", detail=overrun, what=f"scrape of {pod.url}")
