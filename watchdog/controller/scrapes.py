"""One pod's scrape as the cycle sees it: the body fetched, then parsed at once, as an outcome.

:meth:`Scrapes.on_loop` is the coroutine the cycle runs for every pod on the scraper's event loop (the parse runs
there too, as soon as the body arrived, so no more bodies are alive than scrapes in flight); :meth:`Scrapes.timed`
the same on a pool thread for a scraper without a loop (tests' fakes); :meth:`Scrapes.scrape` the synchronous one
(the confirmation before a deletion). Each pod's ``scrape_seconds`` (the fan-out's order and size next cycle) is
the time from the start of its fetch to the end of its parse, never the time it waited for its turn; its
``read_at`` the moment that ended, on ``clock`` (the sample's time: never before the body it reads arrived, so the
stall clock never starts before the read that showed progress; docs in :mod:`watchdog.controller.cycle`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from watchdog.adapters.logs import facts
from watchdog.adapters.metrics import Metrics
from watchdog.adapters.scrape import ScrapeError
from watchdog.controller.fanout import FULL_EVERY
from watchdog.controller.ports import AsyncFetcher, Fetcher
from watchdog.controller.state import PodRecord
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import ParseResult, parse_exposition
from watchdog.core.profiles import Profile

log = logging.getLogger("watchdog.controller.cycle")

Outcome = tuple[str, ParseResult | None]  # (outcome: "ok" or a ScrapeError reason or "parse", the parsed body)


class Scrapes:
    """Fetch with ``scraper``, parse with the target's profile; why a scrape failed goes to ``pod.scrape_detail``."""

    def __init__(self, scraper: Fetcher, profiles: dict[str, Profile], metrics: Metrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scraper, self.profiles, self.metrics, self.clock = scraper, profiles, metrics, clock
        # the scraper's own event loop, when it has one (decided once: a Protocol check per pod costs microseconds)
        self.loop: AsyncFetcher | None = scraper if isinstance(scraper, AsyncFetcher) else None

    def scrape(self, target: WatchedPod, pod: PodRecord | None = None) -> Outcome:
        try:
            return self._parse(target, pod, self.scraper.fetch(target.url))
        except ScrapeError as exc:
            return self._failed(target, pod, exc)

    def timed(self, target: WatchedPod, pod: PodRecord) -> Outcome:
        start = time.perf_counter()
        try:
            return self.scrape(target, pod)
        finally:
            self._ended(pod, start)

    async def on_loop(self, target: WatchedPod, pod: PodRecord) -> Outcome:
        assert self.loop is not None  # the cycle runs this only on the scraper's own loop
        start = time.perf_counter()
        try:
            short = pod.deadline_s
            body = await (self.loop.fetch_async(target.url) if short is None
                          else self.loop.fetch_async(target.url, deadline_s=short))
            return self._parse(target, pod, body)
        except ScrapeError as exc:
            return self._failed(target, pod, exc)
        except Exception as exc:  # one pod's unexpected trouble is its own unknown, never the others' (one batch)
            log.exception("scrape of %s failed unexpectedly", target.ref, extra=facts(target))
            return self._failed(target, pod, ScrapeError("connection", f"scrape failed unexpectedly: "
                                                                       f"{type(exc).__name__}: {exc}"[:300]))
        finally:
            self._ended(pod, start)

    def _ended(self, pod: PodRecord, start: float) -> None:
        """The scrape that started at ``start`` (perf_counter) ended: its duration and its sample's time."""
        pod.scrape_seconds = time.perf_counter() - start
        pod.read_at = self.clock()

    def _failed(self, target: WatchedPod, pod: PodRecord | None, exc: ScrapeError) -> Outcome:
        log.debug("scrape %s of %s failed: %s", target.url, target.ref, exc,
                  extra=facts(target, result=exc.reason, reason=str(exc)))
        if pod is not None:
            pod.scrape_detail = str(exc)
            if exc.reason == "timeout" and pod.deadline_s is not None:
                pod.scrape_detail += (f" (a shortened deadline: its last {pod.timeouts} scrapes timed out; every "
                                      f"{FULL_EVERY}th cycle it gets the full deadline)")
        return exc.reason, None

    def _parse(self, target: WatchedPod, pod: PodRecord | None, body: bytes) -> Outcome:
        parsed = parse_exposition(body, self.profiles[target.target_name])
        if parsed.overrun:  # over the parse bounds: unknown, never evidence (and no partial result)
            log.info("pod %s: %s: its engines are unknown this cycle", target.ref, parsed.overrun,
                     extra=facts(target, result="parse", reason=parsed.overrun))
            if pod is not None:
                pod.scrape_detail = parsed.overrun
            return "parse", None
        if parsed.dropped_series:
            self.metrics.series_dropped.inc(parsed.dropped_series)
        return "ok", parsed
