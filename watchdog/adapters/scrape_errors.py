"""How a scrape fails and what bounds it: :class:`ScrapeError` (its reasons are the vocabulary's scrape
outcomes) and :class:`ScrapeLimits`."""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.core.vocab import SCRAPE_ERRORS

REASONS = SCRAPE_ERRORS


class ScrapeError(Exception):
    """A scrape failed. ``reason`` is one of :data:`REASONS`; ``detail`` one line for humans.

    Reasons: ``timeout`` (no connection within the connect timeout, or the total deadline passed),
    ``refused`` (connection refused, also after the retry), ``http_status`` (any non-2xx status, 3xx
    included), ``too_large`` (body above the cap), ``bad_encoding`` (a Content-Encoding other than gzip or
    identity, or a corrupt/truncated gzip stream), ``connection`` (any other transport failure: reset, DNS,
    TLS, broken chunking, unsupported URL), ``parse`` (for callers that could not use the body; never raised
    by :meth:`Scraper.fetch`). ``str(error)`` is the detail, e.g. ``timeout after 3.0 s``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown scrape error reason {reason!r}")
        self.reason = reason
        self.detail = " ".join(detail.split())
        super().__init__(self.detail)

    def __str__(self) -> str:
        return self.detail


@dataclass(frozen=True)
class ScrapeLimits:
    """Bounds of one scrape: seconds for the timeouts, bytes (after decompression) for the body (the settings
    connectTimeoutSeconds, scrapeDeadlineSeconds and maxBodyBytes hold their defaults)."""

    connect_timeout_s: float
    deadline_s: float
    max_bytes: int

    def __post_init__(self) -> None:
        if not (self.connect_timeout_s > 0 and self.deadline_s > 0):
            raise ValueError("connect_timeout_s and deadline_s must be > 0 seconds")
        if self.max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
