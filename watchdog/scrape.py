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
import heapq
import re
import socket
import threading
import time
import zlib
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any
from urllib.parse import urlsplit

import requests
import tenacity
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from watchdog import __version__

__all__ = ["REASONS", "ScrapeError", "ScrapeLimits", "Scraper"]

REASONS = frozenset({"timeout", "refused", "http_status", "too_large", "bad_encoding", "parse", "connection"})
_CHUNK = 64 * 1024
_RETRY_PAUSE_S = 0.05
_HEADERS = {"User-Agent": f"vllm-stall-watchdog/{__version__}", "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "gzip"}


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
    """Bounds of one scrape: seconds for the timeouts, bytes (after decompression) for the body."""

    connect_timeout_s: float = 1.0
    deadline_s: float = 3.0
    max_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if not (self.connect_timeout_s > 0 and self.deadline_s > 0):
            raise ValueError("connect_timeout_s and deadline_s must be > 0 seconds")
        if self.max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")


class _DeadlineGuard:
    """Shuts down the socket of the current request when the deadline passes (armed per fetch)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._sock: socket.socket | None = None
        self._done = False
        self._lock = threading.Lock()
        _DEADLINES.arm(self)

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def disarm(self) -> None:
        with self._lock:
            self._done = True
            self._sock = None


class _Deadlines:
    """One thread fires every guard at its deadline (a Timer thread per fetch cost 30% of a scrape's CPU)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _DeadlineGuard]] = []  # (deadline, id(guard), guard)
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="scrape-deadlines", daemon=True)

    def arm(self, guard: _DeadlineGuard) -> None:
        with self._wake:
            heapq.heappush(self._heap, (guard.deadline, id(guard), guard))
            if not self._thread.is_alive():  # started by the first fetch
                self._thread.start()
            if self._heap[0][2] is guard:  # the earliest deadline now
                self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._heap and self._heap[0][0] <= time.monotonic():
                    heapq.heappop(self._heap)[2]._fire()  # a disarmed guard ignores it
                self._wake.wait(max(0.0, self._heap[0][0] - time.monotonic()) if self._heap else None)


_DEADLINES = _Deadlines()
_ACTIVE = threading.local()  # .guard: the _DeadlineGuard of this thread's fetch in progress


class _GuardMixin:
    sock: socket.socket | None

    def getresponse(self) -> Any:
        guard = getattr(_ACTIVE, "guard", None)
        if guard is not None:
            guard.attach(self.sock)
        return super().getresponse()  # type: ignore[misc]


class _GuardedHTTPConnection(_GuardMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardMixin, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class _GuardedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}


class _Retryable(Exception):
    """Connection refused/reset on the first attempt: worth one quick retry."""

    def __init__(self, error: ScrapeError) -> None:
        super().__init__(str(error))
        self.error = error


class Scraper:
    """Bounded, credential-free GET of ``/metrics`` URLs; one instance may be shared by worker threads."""

    def __init__(self, limits: ScrapeLimits = ScrapeLimits()) -> None:
        self.limits = limits
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
            adapter = _GuardedAdapter(pool_connections=4, pool_maxsize=1, max_retries=0)
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
        guard = _DeadlineGuard(deadline)
        _ACTIVE.guard = guard
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
            _ACTIVE.guard = None
            guard.disarm()
            if response is not None:
                response.close()

    def _read_body(self, response: requests.Response, url: str, guard: _DeadlineGuard) -> bytes:
        if not 200 <= response.status_code < 300:
            detail = f"HTTP {response.status_code} {response.reason or ''}".strip()
            if 300 <= response.status_code < 400:
                detail += f" (redirect to {response.headers.get('Location', '?')} not followed)"
            raise ScrapeError("http_status", detail)
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "", "gzip", "x-gzip"):
            raise ScrapeError("bad_encoding", f"bad encoding: unsupported Content-Encoding {encoding!r}")
        cap = self.limits.max_bytes
        inflater = _Inflater(cap) if encoding in ("gzip", "x-gzip") else None
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

    def _map_error(self, exc: BaseException, guard: _DeadlineGuard) -> ScrapeError:
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


class _Inflater:
    """Incremental gzip decoding that never produces more than ``cap`` + 1 bytes in total."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._out = 0
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, chunk: bytes) -> bytes:
        pieces: list[bytes] = []
        data = chunk
        try:
            while data:
                if self._d.eof:  # a further gzip member (concatenated gzip is valid)
                    data = self._d.unused_data + data if self._d.unused_data else data
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                piece = self._d.decompress(data, self._cap - self._out + 1)
                self._out += len(piece)
                if self._out > self._cap:
                    raise ScrapeError("too_large", f"too large: body above {self._cap} bytes after gzip")
                pieces.append(piece)
                data = self._d.unconsumed_tail or (self._d.unused_data if self._d.eof else b"")
                if self._d.eof and data:
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        except zlib.error as exc:
            raise ScrapeError("bad_encoding", f"bad encoding: corrupt gzip body ({exc})") from None
        return b"".join(pieces)

    def finish(self) -> None:
        if not self._d.eof:
            raise ScrapeError("bad_encoding", "bad encoding: truncated gzip body")


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
