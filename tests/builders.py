"""Small builders for tests: the watchdog with fakes in place of its real collaborators
(:func:`watchdog.controller.wiring.build` does the building), and :class:`OnLoop`, which makes a test's synchronous
fake scraper (``fetch(url) -> bytes``) an AsyncFetcher: each fetch runs on the scrape loop, in a thread of its own,
as concurrently as the fan-out allows."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from watchdog.adapters.ascrape import AsyncScraper
from watchdog.adapters.prometheus import PrometheusLimits
from watchdog.adapters.scrape_errors import ScrapeLimits
from watchdog.config.settings import Settings, defaults
from watchdog.controller.actuator import Actuator
from watchdog.controller.cycle import Watchdog, rails_from
from watchdog.controller.evidence import EvidenceKeeper
from watchdog.controller.wiring import build
from watchdog.core.escalation import NodeStallHistory
from watchdog.core.policy import Rails
from watchdog.core.quarantine import QuarantineRails

#: The global stall policy at the settings' defaults (what discovery resolves overlapping targets against).
BASE = defaults().base_policy


class OnLoop(AsyncScraper):
    """``fake.fetch`` as the scraper (``close`` closes both)."""

    def __init__(self, fake: Any) -> None:
        super().__init__(scrape_limits(), encoding=defaults().scrape_encoding)
        self.fake = fake

    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
        body: bytes = await asyncio.to_thread(self.fake.fetch, url)
        return body

    def fetch(self, url: str) -> bytes:
        body: bytes = self.fake.fetch(url)
        return body

    def close(self) -> None:
        super().close()
        if hasattr(self.fake, "close"):
            self.fake.close()


def watchdog(config: Settings, kube: Any, *, scraper: Any = None, **kw: Any) -> Watchdog:
    """The watchdog of ``config`` on ``kube``; ``scraper``: an AsyncFetcher, or a synchronous fake (wrapped in
    :class:`OnLoop`); the rest as :func:`watchdog.controller.wiring.build` takes it."""
    if scraper is not None and not hasattr(scraper, "fetch_async"):
        scraper = OnLoop(scraper)
    return build(config, kube, scraper=scraper, **kw)


def remediator(kube: Any, policy: Any, rescrape: Any, metrics: Any, *, actuator: Any = None, events: Any = None,
               evidence: Any = None, **kw: Any) -> Any:
    """The remediator with what a test leaves out built as the watchdog would with the settings' defaults (one
    leader, no ledger, no node escalation, the real clocks unless given): an unfenced actuator, an Event recorder
    and an evidence keeper on it (clocks as given)."""
    from watchdog.adapters.events import EventRecorder
    from watchdog.controller.remediator import Remediator

    config = defaults()
    actuator = actuator or Actuator(kube, write_timeout_s=config.api_timeout_seconds)
    clocks = {k: kw[k] for k in ("clock", "wall_clock") if k in kw}
    given = {"grace_period_s": config.grace_period_seconds, "require_controller": config.require_controller,
             "clock": time.monotonic,
             "wall_clock": time.time, "escalation": None, **kw}
    return Remediator(kube, policy, rescrape, metrics, actuator=actuator,
                      events=events or EventRecorder(kube, actuator, metrics),
                      evidence=evidence or evidence_keeper(actuator, **clocks), **given)


def scrape_limits(**changes: Any) -> ScrapeLimits:
    """One scrape's bounds at the settings' defaults (their one source), but for ``changes``."""
    s = defaults()
    return dataclasses.replace(ScrapeLimits(s.connect_timeout_seconds, s.scrape_deadline_seconds, s.max_body_bytes),
                               **changes)


def prometheus_limits(url: str, **changes: Any) -> PrometheusLimits:
    """The Prometheus client's bounds at the settings' defaults (their one source), but for ``changes``."""
    s = defaults()
    return PrometheusLimits(url, **{"timeout_s": s.prometheus_timeout_seconds, "max_bytes": s.prometheus_max_bytes,
                                    **changes})


def scraper(limits: ScrapeLimits | None = None) -> AsyncScraper:
    """The bounded scraper within ``limits`` (default: the settings'), asking for the settings' scrape encoding."""
    return AsyncScraper(limits or scrape_limits(), encoding=defaults().scrape_encoding)


def actuator(kube: Any, **kw: Any) -> Actuator:
    """The actuator on ``kube``, one API request's timeout at the settings' default (its one source); unfenced
    unless ``fence`` is given."""
    return Actuator(kube, write_timeout_s=defaults().api_timeout_seconds, **kw)


def evidence_keeper(actuator: Any, **kw: Any) -> EvidenceKeeper:
    """The evidence keeper on ``actuator``, its log tail (lines, bytes) at the settings' defaults (their one
    source) unless given; clocks as given, else the real ones."""
    config = defaults()
    return EvidenceKeeper(actuator, **{"log_lines": config.evidence_log_lines, "log_bytes": config.evidence_log_bytes}
                          | kw)


def node_history(**changes: Any) -> NodeStallHistory:
    """Node escalation's memory at the settings' threshold and window (their one source), with ``changes``."""
    config = defaults()
    return NodeStallHistory(**{"threshold": config.node_escalation_threshold,
                               "window_s": config.node_escalation_window_seconds} | changes)


def rails(**changes: Any) -> Rails:
    """The policy's limits at the settings' defaults (their one source), with ``changes``."""
    return dataclasses.replace(rails_from(defaults()), **changes)


def quarantine_rails(**changes: Any) -> QuarantineRails:
    """The readiness gate's limits at the settings' defaults (their one source), with ``changes``."""
    config = defaults()
    return QuarantineRails(**{f.name: getattr(config, f.name) for f in dataclasses.fields(QuarantineRails)} | changes)
