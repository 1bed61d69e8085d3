"""I/O: one bounded HTTP GET of an engine's ``/metrics``.

:class:`Scraper.fetch` returns the body (bytes, gzip already undone) or raises :class:`ScrapeError`. Bounds
(:class:`ScrapeLimits`): a connect timeout (seconds), a TOTAL deadline per scrape (seconds, measured with
``time.monotonic`` from the call; it covers connecting, waiting for headers, a server that drips one byte a
second -- in the headers or the body -- and the retry), and a cap on the body size after decompression
(bytes; gzip is inflated incrementally with ``zlib`` and ``max_length``, so a gzip bomb stops at the cap
without ever being held in memory).

The request: GET only, ``Accept-Encoding: gzip``, redirects are never followed (a 3xx is an error),
nothing from the environment (sent straight to a ``requests`` adapter: no proxies, netrc, CA settings, cookies),
no credentials of any kind (no Authorization header; URLs with a user/password are refused), only ``http(s)://``.
Connection refused/reset is retried once after 50 ms (``tenacity``) if the deadline allows.

How the deadline holds: every socket read has a timeout of at most the remaining time, and a timer armed
for the deadline (one thread serves every fetch) shuts the socket down (which wakes any blocked read) when
the deadline passes, because a per-read timeout alone is restarted by every dripped byte.

Thread-safe: each thread gets its own ``requests.Session`` (thread-local); :meth:`Scraper.close` closes all.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from http.client import HTTPException
from typing import Any
from urllib.parse import urlsplit

import requests
import tenacity
import urllib3.exceptions

from watchdog import __version__
from watchdog.adapters.deadline import ACTIVE, DeadlineGuard, GuardedAdapter
from watchdog.adapters.inflate import Inflater
from watchdog.adapters.scrape_errors import REASONS, ScrapeError, ScrapeLimits

__all__ = ["REASONS", "ScrapeError", "ScrapeLimits", "Scraper"]

_CHUNK = 64 * 1024
_RETRY_PAUSE_S = 0.05
_HEADERS = {"User-Agent": f"vllm-stall-watchdog/{__version__}", "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "gzip"}


class _Retryable(Exception):
    """Connection refused/reset on the first attempt: worth one quick retry."""

    def __init__(self, error: ScrapeError) -> None:
        super().__init__(str(error))
        self.error = error


class Scraper:
    """Bounded, credential-free GET of ``/metrics`` URLs; one instance may be shared by worker threads."""

    def __init__(self, limits: ScrapeLimits | None = None) -> None:
        self.limits = limits or ScrapeLimits()
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def fetch(self, url: str) -> bytes:
        """GET ``url``; return the body (bytes, gzip undone). Raises :class:`ScrapeError`."""
        _check_url(url)
        deadline = time.monotonic() + self.limits.deadline_s
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Retryable),
            stop=tenacity.stop_after_attempt(2),
            wait=tenacity.wait_fixed(_RETRY_PAUSE_S),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    last = attempt.retry_state.attempt_number == 2 or (deadline - time.monotonic() < 2 * _RETRY_PAUSE_S)
                    return self._attempt(url, deadline, retry_allowed=not last)
        except _Retryable as exc:  # pragma: no cover - the last attempt never raises _Retryable
            raise exc.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close every thread's session (idle keep-alive connections). The scraper stays usable."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            adapter = GuardedAdapter(pool_connections=4, pool_maxsize=1, max_retries=0)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _attempt(self, url: str, deadline: float, retry_allowed: bool) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        guard = DeadlineGuard(deadline)
        ACTIVE.guard = guard
        response: requests.Response | None = None
        try:
            # Straight to this thread's adapter: Session.get merges environment, cookies, hooks (10% of the CPU).
            request = requests.Request("GET", url, headers=_HEADERS).prepare()
            response = self._session().get_adapter(url).send(
                request, stream=True, timeout=(min(self.limits.connect_timeout_s, remaining), remaining))
            return self._read_body(response, url, guard)
        except ScrapeError:
            raise
        except (requests.RequestException, urllib3.exceptions.HTTPError, HTTPException, OSError, ValueError) as exc:
            error = self._map_error(exc, guard)
            if retry_allowed and error.reason in ("refused", "connection") and _is_refused_or_reset(exc):
                raise _Retryable(error) from exc
            raise error from exc
        finally:
            ACTIVE.guard = None
            guard.disarm()
            if response is not None:
                response.close()

    def _read_body(self, response: requests.Response, url: str, guard: DeadlineGuard) -> bytes:
        if not 200 <= response.status_code < 300:
            detail = f"HTTP {response.status_code} {response.reason or ''}".strip()
            if 300 <= response.status_code < 400:
                detail += f" (redirect to {response.headers.get('Location', '?')} not followed)"
            raise ScrapeError("http_status", detail)
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "", "gzip", "x-gzip"):
            raise ScrapeError("bad_encoding", f"bad encoding: unsupported Content-Encoding {encoding!r}")
        cap = self.limits.max_bytes
        inflater = Inflater(cap) if encoding in ("gzip", "x-gzip") else None
        raw = response.raw
        wire = 0
        parts: list[bytes] = []
        while True:
            if time.monotonic() >= guard.deadline or guard.fired:
                raise ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
            _set_read_timeout(raw, guard.deadline - time.monotonic())
            chunk = raw.read1(_CHUNK, decode_content=False)
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
        body = b"".join(parts)
        if len(body) > cap:
            raise ScrapeError("too_large", f"too large: body above {cap} bytes")
        return body

    def _map_error(self, exc: BaseException, guard: DeadlineGuard) -> ScrapeError:
        if guard.fired or isinstance(exc, (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError)):
            return ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return ScrapeError("timeout", f"timeout: no connection within {self.limits.connect_timeout_s} s")
        if _find_cause(exc, ConnectionRefusedError):
            return ScrapeError("refused", "connection refused")
        if isinstance(
            exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema)
        ):
            return ScrapeError("connection", f"invalid URL: {_short(exc)}")
        if isinstance(exc, TimeoutError) or _find_cause(exc, TimeoutError):
            return ScrapeError("timeout", f"timeout after {self.limits.deadline_s} s")
        return ScrapeError("connection", f"connection failed: {_short(exc)}")


def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@`` (for messages)."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url)


def _check_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        scheme, host, has_credentials = parts.scheme.lower(), parts.hostname, "@" in parts.netloc
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ScrapeError("connection", f"invalid URL {redact(url)!r}: {exc}") from None
    if scheme not in ("http", "https"):
        raise ScrapeError("connection", f"invalid URL {redact(url)!r}: only http:// and https:// URLs are scraped")
    if not host:
        raise ScrapeError("connection", f"invalid URL {redact(url)!r}: no host")
    if has_credentials:
        raise ScrapeError("connection", "invalid URL: credentials in URLs are never sent")


def _set_read_timeout(raw: Any, seconds: float) -> None:
    """Let the next socket read wait at most ``seconds`` (the time left until the deadline)."""
    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.settimeout(max(0.001, seconds))


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
