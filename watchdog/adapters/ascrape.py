"""I/O: the bounded GET of ``/metrics`` on one asyncio event loop, the answer read by ``httptools`` (llhttp): the one
scrape transport of ``run`` and ``check``.

:class:`AsyncScraper` applies the request and answer rules of :mod:`watchdog.adapters.scrape` (URLs, headers, the
head check, the retry; ``ScrapeError`` reasons and messages); every scrape is a coroutine on ONE loop, run by one
daemon thread that starts with the first scrape and stops with :meth:`AsyncScraper.close` (a later scrape starts it
again):

- :meth:`AsyncScraper.fetch_async` -- ``await`` it on the loop (the cycle's fan-out: :meth:`AsyncScraper.run`);
- :meth:`AsyncScraper.fetch` -- the synchronous call (the confirmation scrape, ``check``): runs the coroutine on
  the loop and waits for it. Never from the loop thread itself.

Bounds: the TOTAL deadline (``asyncio.timeout_at`` on the loop's monotonic clock) around the whole attempt loop --
connecting, TLS, waiting for headers, a server dripping bytes in the headers or the body, and the retry; a
connect timeout (TCP and TLS handshake, at most the time left); the body cap counted on the wire and again after
inflating (:class:`~watchdog.adapters.inflate.Inflater`); the response head at most :data:`MAX_HEAD` bytes
(counted as it is fed to the parser, 4 KiB at a time); 1xx answers skipped. ``Connection: close``;
content-length, chunked and close-delimited bodies are framed by llhttp (a framed body cut short is an error);
the parser stops at the end of the answer (a pipelined second answer or garbage after it is never read); a 101
or a status below 100 is an error; at most 64 KiB of framing without a body byte (chunk sizes, extensions,
trailers) and at most twice the cap plus 64 KiB on the wire. The request is written here: its target and Host must be
visible ASCII (else refused before sending). A 3xx is an error, never followed. Nothing is read from the
environment (no proxies, netrc, CA variables): the connection is a plain ``loop.create_connection`` to the URL's
host and port, HTTPS verified with :func:`~watchdog.adapters.connect.client_tls` (certifi's bundle) and the URL's
host as ``server_hostname``.
Connection refused/reset (or closed before any answer, as ``http.client`` counts it) is retried once after
50 ms if the deadline leaves room: tenacity's ``AsyncRetrying`` decides.
Why one loop: a thread per scrape cost 5-30 context switches and 0.2-0.6 ms of system time per scrape, and
``http.client``'s header parsing a quarter of the GET; why llhttp: h11 (pure Python) took ~185 us per 65 KB
answer, httptools ~7 us (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import ssl
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httptools
import tenacity

from watchdog.adapters.connect import client_tls
from watchdog.adapters.httpanswer import MAX_HEAD, Answer, feed
from watchdog.adapters.scrape import (
    _RETRY_PAUSE_S,
    _RETRY_POLICY,
    _check_url,
    _request_headers,
    _Retryable,
    _short,
    _Url,
)
from watchdog.adapters.scrape_errors import ScrapeError, ScrapeLimits

__all__ = ["MAX_HEAD", "AsyncScraper"]

T = TypeVar("T")
_HEAD_STEP = 4 * 1024  # bytes fed to the parser at once until the final answer's head is read
_BODY_STEP = 64 * 1024  # then
_TOKEN = re.compile(r"[!-~]+")  # what a request target and a Host value may hold: visible ASCII, no space
_BUFFERED = 256 * 1024  # bytes received and not yet read at most, per connection (then reading pauses)


class _ConnectTimeout(Exception):
    """No connection within the connect timeout (told apart from the total deadline)."""


class _Wire(asyncio.Protocol):
    """One connection's bytes as they arrive, for one reader (a StreamReader and StreamWriter per scrape cost more
    than the whole of this). Reading pauses while more than :data:`_BUFFERED` bytes wait to be read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _BUFFERED and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> bytes:
        """What arrived since the last read; b"" at the end of the stream; raises what broke the connection."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._eof:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered > _BUFFERED and self.transport is not None:
            self.transport.resume_reading()
        self._buffered = 0
        return data


async def _open(target: _Url, tls: ssl.SSLContext | None) -> _Wire:
    """One TCP (and TLS) connection; a module function so that tests can count connection attempts."""
    loop = asyncio.get_running_loop()
    if tls is None:
        _, wire = await loop.create_connection(_Wire, target.host, target.port)
    else:
        _, wire = await loop.create_connection(_Wire, target.host, target.port, ssl=tls, server_hostname=target.host)
    return wire


class AsyncScraper:
    """Bounded, credential-free GET of ``/metrics`` URLs on one event loop; shareable by any number of threads."""

    def __init__(self, limits: ScrapeLimits, *, encoding: str) -> None:
        self.limits = limits
        self.headers = _request_headers(encoding)
        self._fields = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())  # the request's lines after Host
        self._retrying = tenacity.AsyncRetrying(**_RETRY_POLICY)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the scrape loop (started if need be); its future."""
        return asyncio.run_coroutine_threadsafe(coro, self._running_loop())

    def fetch(self, url: str) -> bytes:
        """GET ``url`` (on the loop; this thread waits); return the body (bytes, gzip undone). Raises ScrapeError."""
        loop = self._running_loop()
        if threading.current_thread() is self._thread:
            raise RuntimeError("AsyncScraper.fetch called from its own loop: await fetch_async instead")
        target = _check_url(url)  # an invalid URL fails here, before anything is scheduled
        try:
            return asyncio.run_coroutine_threadsafe(self._fetch(target), loop).result()
        except concurrent.futures.CancelledError:  # close() while it ran
            raise ScrapeError("connection", "scrape cancelled: the scraper was closed") from None

    def close(self) -> None:
        """Stop the loop (scrapes still running are cancelled) and its thread; a later scrape starts them anew."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="scrape-loop", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    # -- one scrape -----------------------------------------------------------------------------------------
    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
        """GET ``url`` on the running loop; the body (bytes, gzip undone). ``deadline_s``: a shorter deadline for
        this scrape (never longer than the limits'). Raises :class:`ScrapeError`."""
        return await self._fetch(_check_url(url), deadline_s)

    async def _fetch(self, target: _Url, deadline_s: float | None = None) -> bytes:
        loop = asyncio.get_running_loop()
        seconds = self.limits.deadline_s if deadline_s is None else min(deadline_s, self.limits.deadline_s)
        deadline = loop.time() + seconds  # the loop's clock is time.monotonic
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    return await self._attempt(target, deadline)
                except _Retryable as exc:
                    first = exc
                # Only a refused/reset first attempt goes through tenacity: its outcome is replayed to it, so that
                # its policy alone decides the pause and the one retry (a copy per retry: no state shared between
                # the scrapes interleaved on the loop).
                outcomes: list[_Retryable] = [first]

                async def attempt() -> bytes:
                    if outcomes:
                        raise outcomes.pop()
                    return await self._attempt(target, deadline)

                try:
                    return await self._retrying.copy()(attempt)
                except _Retryable as exc:
                    raise exc.error from None
        except TimeoutError:
            raise ScrapeError("timeout", f"timeout after {seconds} s") from None

    async def _attempt(self, target: _Url, deadline: float) -> bytes:
        loop = asyncio.get_running_loop()
        wire: _Wire | None = None
        try:
            request = self._request(target)  # a URL a request line cannot carry is refused before connecting
            tls = client_tls() if target.scheme == "https" else None
            try:
                async with asyncio.timeout(min(self.limits.connect_timeout_s, deadline - loop.time())):
                    wire = await _open(target, tls)
            except TimeoutError:
                if loop.time() >= deadline:
                    raise  # the total deadline (asyncio.timeout_at above) says so
                raise _ConnectTimeout from None
            return await self._exchange(request, wire)
        except (ScrapeError, TimeoutError, asyncio.CancelledError):
            raise
        except _ConnectTimeout:
            raise ScrapeError("timeout", f"timeout: no connection within {self.limits.connect_timeout_s} s") from None
        except (httptools.HttpParserError, OSError, ValueError, EOFError) as exc:
            error = (ScrapeError("refused", "connection refused") if isinstance(exc, ConnectionRefusedError)
                     else ScrapeError("connection", f"connection failed: {_short(exc)}"))
            if isinstance(exc, ConnectionRefusedError | ConnectionResetError) \
                    and deadline - loop.time() >= 2 * _RETRY_PAUSE_S:  # a retry has room before the deadline
                raise _Retryable(error) from exc
            raise error from exc
        finally:
            if wire is not None and wire.transport is not None:
                wire.transport.abort()  # Connection: close; nothing is reused, nothing left to flush

    async def _exchange(self, request: bytes, wire: _Wire) -> bytes:
        assert wire.transport is not None  # connected
        wire.transport.write(request)
        answer = Answer(self.limits.max_bytes)
        parser = answer.parser = httptools.HttpResponseParser(answer)
        try:
            while not answer.done:
                data = await wire.read()
                if not data:  # the end of the stream: an answer without framing ends here; any other is cut short
                    if not answer.received:  # closed before any answer: as http.client's RemoteDisconnected
                        raise ConnectionResetError("Remote end closed connection without response")
                    if answer.head is not None and not answer.framed:
                        break
                    raise ConnectionResetError("connection closed before the end of the answer")
                answer.received = True
                view = memoryview(data)
                while view and not answer.done:
                    # Until the final answer's head is read, small pieces: its size is checked between them (llhttp
                    # keeps a header line in memory until its end). The loop is held for one read at most (at most
                    # _BUFFERED bytes: ~15 ms of 1-byte chunks or 1xx answers, a 65 KB body ~10 us).
                    step = _HEAD_STEP if answer.head is None else _BODY_STEP
                    piece, view = view[:step], view[step:]
                    feed(parser, piece)
                    answer.account(len(piece))
            return answer.body()
        finally:
            answer.parser = None  # the parser holds the answer: no reference cycle for the (paused) collector

    def _request(self, target: _Url) -> bytes:
        """The request's bytes; ValueError when the URL's target or Host cannot be sent in a request line."""
        host = f"[{target.host}]" if ":" in target.host else target.host
        if target.port != (443 if target.scheme == "https" else 80):
            host += f":{target.port}"
        if not _TOKEN.fullmatch(target.path) or not _TOKEN.fullmatch(host):
            raise ValueError(f"invalid URL: {target.path!r} or {host!r} cannot be sent in a request line")
        return f"GET {target.path} HTTP/1.1\r\nHost: {host}\r\n{self._fields}\r\n".encode("ascii")


async def _cancel_all() -> None:
    """Cancel every task on this loop but the caller's, and wait for them to end."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
