"""I/O: one bounded HTTP GET of an engine's ``/metrics``.

:class:`Scraper.fetch` returns the body (bytes, gzip already undone) or raises :class:`ScrapeError`. Bounds
(:class:`ScrapeLimits`): a connect timeout (seconds), a TOTAL deadline per scrape (seconds, measured with
``time.monotonic`` from the call; it covers connecting, waiting for headers, a server that drips one byte a
second -- in the headers or the body -- and the retry), and a cap on the body size after decompression
(bytes; gzip is inflated incrementally with ``zlib`` and ``max_length``, so a gzip bomb stops at the cap
without ever being held in memory).

The request: GET only, ``Accept-Encoding: identity`` (or ``gzip`` when the scraper is built with
``encoding="gzip"``; a gzip answer is inflated under the same cap either way), ``Connection: close``, redirects
are never followed (a 3xx is an error), nothing from the environment (no proxies, netrc, CA settings, cookies:
a bare ``urllib3`` connection reads none of them; HTTPS verifies against ``certifi``'s CA bundle, as ``requests``
did), no credentials of any kind (no Authorization header; URLs with a user/password are refused), only ``http(s)://``.
Connection refused/reset is retried once after 50 ms (``tenacity``) if the deadline allows.

Why a bare ``urllib3.connection.HTTPConnection`` per scrape (the HTTP/1.1 client ``requests`` and urllib3's
pools use underneath) and no pool: the pods close idle connections long before the next cycle (uvicorn after
5 s, the interval is 15 s), so a pool never reuses one and only adds its bookkeeping; ``requests`` added
~1 ms of CPU per GET (docs/scaling.md).

How the deadline holds: every socket read has a timeout of at most the remaining time, and a timer armed
for the deadline (one thread serves every fetch) shuts the socket down (which wakes any blocked read) when
the deadline passes, because a per-read timeout alone is restarted by every dripped byte.

Thread-safe: nothing is shared between fetches but the limits and the TLS context (built once, read-only).
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any
from urllib.parse import urlsplit

import tenacity
import urllib3.exceptions
from urllib3.connection import HTTPConnection
from urllib3.response import BaseHTTPResponse

from watchdog import __version__
from watchdog.adapters.connect import connection
from watchdog.adapters.deadline import DeadlineGuard
from watchdog.adapters.inflate import Inflater
from watchdog.adapters.scrape_errors import REASONS, ScrapeError, ScrapeLimits

__all__ = ["ENCODINGS", "REASONS", "ScrapeError", "ScrapeLimits", "Scraper"]

_CHUNK = 64 * 1024
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


class Scraper:
    """Bounded, credential-free GET of ``/metrics`` URLs; one instance may be shared by worker threads."""

    def __init__(self, limits: ScrapeLimits | None = None, encoding: str = "identity") -> None:
        self.limits = limits or ScrapeLimits()
        self.headers = _request_headers(encoding)
        self._retrying = tenacity.Retrying(**_RETRY_POLICY)

    def fetch(self, url: str) -> bytes:
        """GET ``url``; return the body (bytes, gzip undone). Raises :class:`ScrapeError`."""
        target = _check_url(url)
        deadline = time.monotonic() + self.limits.deadline_s
        try:
            return self._attempt(target, deadline)
        except _Retryable as exc:
            first = exc
        # Only a refused/reset first attempt goes through tenacity (its per-call bookkeeping cost 0.1-0.2 ms of CPU
        # per scrape with 136 scrape threads): the first outcome is replayed to it, so that its policy alone
        # decides the pause and the one retry.
        outcomes: list[_Retryable] = [first]

        def attempt() -> bytes:
            if outcomes:
                raise outcomes.pop()
            return self._attempt(target, deadline)

        try:
            return self._retrying(attempt)
        except _Retryable as exc:
            raise exc.error from None

    def close(self) -> None:
        """Nothing to release: every scrape opens and closes its own connection. The scraper stays usable."""

    def _attempt(self, target: _Url, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        guard = DeadlineGuard(deadline)
        conn: HTTPConnection | None = None
        try:
            conn = connection(target.scheme, target.host, target.port, min(self.limits.connect_timeout_s, remaining))
            conn.connect()
            guard.attach(conn.sock)
            conn.timeout = max(0.001, deadline - time.monotonic())  # every read from here on: the time left
            conn.request("GET", target.path, headers=self.headers, preload_content=False, decode_content=False)
            return self._read_body(conn.getresponse(), guard)
        except ScrapeError:
            raise
        except (urllib3.exceptions.HTTPError, HTTPException, OSError, ValueError) as exc:
            error = self._map_error(exc, guard)
            if error.reason in ("refused", "connection") and _is_refused_or_reset(exc) \
                    and deadline - time.monotonic() >= 2 * _RETRY_PAUSE_S:  # a retry has room before the deadline
                raise _Retryable(error) from exc
            raise error from exc
        finally:
            guard.disarm()
            if conn is not None:
                conn.close()

    def _read_body(self, response: BaseHTTPResponse, guard: DeadlineGuard) -> bytes:
        cap = self.limits.max_bytes
        inflater = check_head(response.status, response.reason or "", response.headers.get("Location"),
                              response.headers.get("Content-Encoding"), cap)
        wire = 0
        parts: list[bytes] = []
        while True:
            if time.monotonic() >= guard.deadline or guard.fired:
                raise ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
            chunk = response.read1(_CHUNK, decode_content=False)
            if not chunk:
                break
            wire += len(chunk)
            if wire > cap:
                raise ScrapeError("too_large", f"too large: body above {cap} bytes")
            parts.append(chunk if inflater is None else inflater.feed(chunk))
        if guard.fired:
            raise ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        if inflater is not None:
            inflater.finish()
        return b"".join(parts)  # within the cap: counted on the wire, and by the Inflater after inflating

    def _map_error(self, exc: BaseException, guard: DeadlineGuard) -> ScrapeError:
        if guard.fired or isinstance(exc, urllib3.exceptions.ReadTimeoutError):
            return ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        if _find_cause(exc, ConnectionRefusedError):
            return ScrapeError("refused", "connection refused")
        if isinstance(exc, urllib3.exceptions.ConnectTimeoutError) and not isinstance(
                exc, urllib3.exceptions.NewConnectionError):
            return ScrapeError("timeout", f"timeout: no connection within {self.limits.connect_timeout_s} s")
        if isinstance(exc, TimeoutError) or _find_cause(exc, TimeoutError):
            return ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        return ScrapeError("connection", f"connection failed: {_short(exc)}")


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


def _find_cause(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        item = stack.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, kind):
            return True
        stack.extend([item.__cause__, item.__context__, getattr(item, "reason", None), *item.args])
    return False


def _is_refused_or_reset(exc: BaseException) -> bool:
    return _find_cause(exc, ConnectionRefusedError) or _find_cause(exc, ConnectionResetError)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
