"""The rules of a scrape's request and answer, apart from the transport (:mod:`watchdog.adapters.ascrape`, the one
scrape transport of ``run`` and ``check``): which URLs are scraped (only ``http(s)://``, a host, no credentials:
:func:`_check_url`), the request headers (GET, ``Accept-Encoding: identity`` or ``gzip``, ``Connection: close``:
:func:`_request_headers`), which final answers are read (2xx only, a redirect named and never followed, identity or
gzip, inflated under the cap: :func:`check_head`), the one retry of a refused or reset connection after 50 ms when
the deadline leaves room (tenacity: :data:`_RETRY_POLICY`), and URLs in messages without their credentials
(:func:`redact`). Nothing from the environment is ever read (no proxies, netrc, CA variables, cookies).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import tenacity

from watchdog import __version__
from watchdog.adapters.inflate import Inflater
from watchdog.adapters.scrape_errors import ScrapeError

__all__ = ["ENCODINGS", "check_head", "redact"]

_RETRY_PAUSE_S = 0.05
_HEADERS = {"User-Agent": f"vllm-stall-watchdog/{__version__}", "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Connection": "close"}
ENCODINGS = ("identity", "gzip")
"""What a scraper may ask for. identity (the default): on loopback, a plain 65 KB body cost 0.3-0.4 ms less CPU
per scrape than its gzip (inflating here, and a bigger GET; tests/bench/bench_scrape.py), and the pod compresses
nothing; gzip sends ~8x fewer bytes over the wire."""


@dataclass(frozen=True)
class _Url:
    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line


class _Retryable(Exception):
    """Connection refused/reset on the first attempt: worth one quick retry (this scraper's and the loop's)."""

    def __init__(self, error: ScrapeError) -> None:
        super().__init__(str(error))
        self.error = error


#: The one retry of both scrapers (tenacity's Retrying here, AsyncRetrying on the loop): refused/reset once more
#: after 50 ms, if the attempt found the deadline leaves room.
_RETRY_POLICY: dict[str, Any] = {"retry": tenacity.retry_if_exception_type(_Retryable),
                                 "wait": tenacity.wait_fixed(_RETRY_PAUSE_S), "stop": tenacity.stop_after_attempt(2),
                                 "reraise": True}


def _request_headers(encoding: str) -> dict[str, str]:
    """The headers of every scrape asking for ``encoding`` (one of :data:`ENCODINGS`, else ValueError)."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
    return {**_HEADERS, "Accept-Encoding": encoding}


def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@`` (for messages)."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url)


def check_head(status: int, reason: str, location: str | None, content_encoding: str | None,
               cap: int) -> Inflater | None:
    """The final answer's head, for both scrapers: a ScrapeError unless 2xx (a redirect is named, never followed)
    with a content coding we read; the inflater (of ``cap`` bytes) for gzip, else None."""
    if not 200 <= status < 300:
        detail = f"HTTP {status} {reason}".strip()
        if 300 <= status < 400:
            detail += f" (redirect to {location or '?'} not followed)"
        raise ScrapeError("http_status", detail)
    encoding = (content_encoding or "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip"):
        raise ScrapeError("bad_encoding", f"bad encoding: unsupported Content-Encoding {encoding!r}")
    return Inflater(cap) if encoding in ("gzip", "x-gzip") else None


@functools.lru_cache(maxsize=16384)  # a pod's URL is the same every cycle
def _check_url(url: str) -> _Url:
    try:
        parts = urlsplit(url)
        scheme, host, has_credentials = parts.scheme.lower(), parts.hostname, "@" in parts.netloc
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise ScrapeError("connection", f"invalid URL {redact(url)!r}: {exc}") from None
    if scheme not in ("http", "https"):
        raise ScrapeError("connection", f"invalid URL {redact(url)!r}: only http:// and https:// URLs are scraped")
    if not host:
        raise ScrapeError("connection", f"invalid URL {redact(url)!r}: no host")
    if has_credentials:
        raise ScrapeError("connection", "invalid URL: credentials in URLs are never sent")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Url(scheme, host, port or (443 if scheme == "https" else 80), path)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
