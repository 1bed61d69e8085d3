"""I/O: bounded instant queries to a Prometheus HTTP API (``source: prometheus``); decides nothing.

:meth:`PrometheusClient.query` POSTs one PromQL expression to ``<url>/api/v1/query`` with ``time=<Unix
seconds>`` and returns the rows of its ``vector`` answer (labels, evaluation time, value). It raises
:class:`PrometheusError` (one line, never a traceback for the caller to print) when Prometheus is unreachable,
answers a non-2xx status, takes longer than the total deadline (``timeout_s``, body included: a dripping
server is cut by the same deadline guard as a scrape), sends a body over ``max_bytes``, answers ``status:
error``, adds ``warnings`` (a partial answer: Thanos/Mimir with a store down) or sends anything that is not
the documented JSON.

The request, on the scraper's bare connection (:mod:`watchdog.adapters.connect`) under the same deadline guard:
no redirects, nothing from the environment (no proxies, netrc or CA bundle variables), ``Accept-Encoding:
identity`` (no decompression at all), ``Authorization: Bearer <token>`` read from ``bearer_token_file`` for
every batch of queries (a projected token rotates), else ``Basic`` from ``username_file`` and ``password_file``
(a mounted ``kubernetes.io/basic-auth`` Secret; also re-read), ``X-Scope-OrgID: <tenant>`` for multi-tenant
engines (Mimir, Cortex), TLS verified against ``ca_file`` when set, else certifi's bundle.
:meth:`query_each` runs several queries at once (one thread each, at most 4), answers (or each one's
:class:`PrometheusError`) as they arrive, each row carrying only the values of the label names asked for; the
answers are decoded one by one in the caller's thread, so that at most one decoded answer is alive besides the raw
bodies still in flight.
Decoding: :mod:`watchdog.adapters.promdecode`.
"""

from __future__ import annotations

import base64
import itertools
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from http.client import HTTPException

import urllib3.exceptions
from urllib3.response import BaseHTTPResponse

from watchdog import __version__
from watchdog.adapters.connect import connection
from watchdog.adapters.deadline import DeadlineGuard
from watchdog.adapters.promdecode import PrometheusError, decode, decode_values, error_text
from watchdog.core.promql import Series, auth_problem, tenant_problem, url_problem

__all__ = ["PrometheusClient", "PrometheusError", "PrometheusLimits"]

_CHUNK = 64 * 1024
_MAX_PARALLEL = 4


@dataclass(frozen=True)
class PrometheusLimits:
    """Where Prometheus is and how one query is bounded (seconds, bytes)."""

    url: str
    timeout_s: float  # prometheusTimeoutSeconds
    max_bytes: int  # prometheusMaxBytes
    bearer_token_file: str | None = None
    ca_file: str | None = None
    username_file: str | None = None  # basic auth: both files, or neither
    password_file: str | None = None
    tenant: str | None = None  # X-Scope-OrgID (Mimir, Cortex)


class PrometheusClient:
    """Instant queries against one Prometheus; thread-safe (a connection per query)."""

    def __init__(self, limits: PrometheusLimits) -> None:
        if problem := url_problem(limits.url):
            raise ValueError(f"Prometheus URL {limits.url!r} {problem}")
        if problem := auth_problem(limits.bearer_token_file, limits.username_file, limits.password_file):
            raise ValueError(f"Prometheus credentials: {problem}")
        if limits.tenant is not None and (problem := tenant_problem(limits.tenant)):
            raise ValueError(f"Prometheus tenant {limits.tenant!r} {problem}")
        self.limits = limits
        parts = urllib.parse.urlsplit(limits.url.rstrip("/") + "/api/v1/query")
        self._scheme, self._host, self._path = parts.scheme, str(parts.hostname), parts.path
        self._port = parts.port or (443 if parts.scheme == "https" else 80)

    def query_each(self, queries: Iterable[tuple[str, tuple[str, ...]] | None], at: float,
                   deadline: float | None = None, query_s: float | None = None,
                   ) -> Iterator[tuple[int, list[Series] | PrometheusError]]:
        """``(index, rows)`` of each of ``queries`` -- (PromQL, the label names whose values its rows carry) --
        as its answer arrives (at most 4 in flight), so the caller can fold one answer in and drop it before the
        next; ``index``: the query's place among those pulled. ``queries`` is pulled lazily, one query per free
        slot, after the caller has seen every answer that came before (so what it yields next may depend on
        them); ``None`` from it: nothing to send until another answer arrives. A failed query's ``rows`` is its
        :class:`PrometheusError` (the others go on: one namespace's oversized answer is that namespace's). All of
        them together get ``timeout_s`` (one deadline for the batch, not one per query), or until ``deadline``
        (monotonic) when given, which several batches can share; ``query_s``: what one query may take at most. The
        credential files are read once per batch (unreadable: every query fails with that)."""
        deadline = time.monotonic() + self.limits.timeout_s if deadline is None else deadline
        pulled = iter(queries)
        try:
            headers = self._headers()
        except PrometheusError as exc:
            yield from enumerate(exc for query in iter(lambda: next(pulled, None), None) if query is not None)
            return
        with ThreadPoolExecutor(max_workers=_MAX_PARALLEL, thread_name_prefix="prometheus") as pool:

            def send(promql: str) -> Future[bytes]:  # one query: until the batch's deadline or its own, the sooner
                if query_s is not None and time.monotonic() + query_s < deadline:
                    return pool.submit(self._post, promql, at, time.monotonic() + query_s, headers,
                                       f"{query_s:g} s (one query's share of the cycle's)")
                return pool.submit(self._post, promql, at, deadline, headers)

            futures: dict[Future[bytes], tuple[int, tuple[str, ...]]] = {}
            numbers = itertools.count()
            try:
                while _fill(futures, pulled, numbers, send):
                    done, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for future in done:  # decoded here, one at a time: at most one answer's rows live besides
                        index, names = futures.pop(future)  # the bodies in flight (memory, not speed)
                        try:
                            rows: list[Series] | PrometheusError = decode_values(future.result(), names)
                        except PrometheusError as exc:
                            rows = exc
                        yield index, rows
            finally:
                for future in futures:
                    future.cancel()

    def query(self, promql: str, at: float) -> list[tuple[dict[str, str], float, float]]:
        """Run ``promql`` alone as an instant query at ``at`` (Unix seconds); the rows with all their labels."""
        return decode(self._post(promql, at, time.monotonic() + self.limits.timeout_s, self._headers()))

    def _headers(self) -> dict[str, str]:
        limits = self.limits
        headers = {"User-Agent": f"vllm-stall-watchdog/{__version__}", "Accept": "application/json",
                   "Accept-Encoding": "identity", "Content-Type": "application/x-www-form-urlencoded"}
        if limits.bearer_token_file:
            headers["Authorization"] = f"Bearer {_secret(limits.bearer_token_file, 'bearer token')}"
        elif limits.username_file and limits.password_file:
            pair = f"{_secret(limits.username_file, 'username')}:{_secret(limits.password_file, 'password')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        if limits.tenant:
            headers["X-Scope-OrgID"] = limits.tenant
        return headers

    def _post(self, promql: str, at: float, deadline: float, headers: dict[str, str], within: str = "") -> bytes:
        limits = self.limits
        no_answer = PrometheusError(f"Prometheus {limits.url}: no answer within {within or f'{limits.timeout_s:g} s'}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise no_answer
        try:  # nothing is connected yet: only the CA file (https) is read here, and a bad one is named as such
            conn = connection(self._scheme, self._host, self._port, remaining, limits.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise PrometheusError(f"prometheusCaFile {limits.ca_file!r} is not a readable CA bundle: "
                                  f"{_why(exc)}") from None
        guard = DeadlineGuard(deadline)
        try:
            conn.connect()
            guard.attach(conn.sock)
            conn.timeout = max(0.001, deadline - time.monotonic())
            form = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"}).encode()
            conn.request("POST", self._path, body=form, headers=headers, preload_content=False,
                         decode_content=False)
            return self._read(conn.getresponse(), guard, no_answer)
        except PrometheusError:
            raise
        except (urllib3.exceptions.HTTPError, HTTPException, OSError, ValueError) as exc:
            timed_out = isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)) and not isinstance(
                exc, urllib3.exceptions.NewConnectionError)  # urllib3 files a refused connection under timeouts
            if guard.fired or timed_out:
                raise no_answer from None
            raise PrometheusError(f"Prometheus {limits.url} unreachable: {_why(exc)}") from None
        finally:
            guard.disarm()
            conn.close()

    def _read(self, response: BaseHTTPResponse, guard: DeadlineGuard, no_answer: PrometheusError) -> bytes:
        cap = self.limits.max_bytes
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", ""):
            raise PrometheusError(f"Prometheus answered with Content-Encoding {encoding!r} (identity was asked)")
        parts: list[bytes] = []
        size = 0
        while True:
            if guard.fired or time.monotonic() >= guard.deadline:
                raise no_answer
            chunk = response.read1(_CHUNK, decode_content=False)
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                raise PrometheusError(f"Prometheus answer larger than prometheusMaxBytes (check: --max-bytes), "
                                      f"{cap} bytes")
            parts.append(chunk)
        if guard.fired:
            raise no_answer
        body = b"".join(parts)
        if not 200 <= response.status < 300:
            detail = error_text(body)
            raise PrometheusError(f"Prometheus answered HTTP {response.status}"
                                  + (f": {detail}" if detail else "")
                                  + (" (redirect not followed)" if 300 <= response.status < 400 else ""))
        return body


def _fill(futures: dict[Future[bytes], tuple[int, tuple[str, ...]]],
          pulled: Iterator[tuple[str, tuple[str, ...]] | None], numbers: Iterator[int],
          send: Callable[[str], Future[bytes]]) -> bool:
    """Send queries pulled from ``pulled`` into the free slots; whether any is in flight."""
    while len(futures) < _MAX_PARALLEL:
        query = next(pulled, None)
        if query is None:  # none to send until an answer arrives (or none left)
            break
        futures[send(query[0])] = (next(numbers), query[1])
    return bool(futures)


def _secret(path: str, what: str) -> str:
    """The one-line secret in ``path``, re-read at every query (a mounted Secret or projected token rotates)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise PrometheusError(f"cannot read the {what} file {path}: {getattr(exc, 'strerror', None) or exc}"
                              ) from None
    if not text or any(c in text for c in "\r\n") or not text.isprintable():
        raise PrometheusError(f"the {what} file {path} holds no single-line {what}")
    return text


def _why(exc: BaseException) -> str:
    """The root cause of a failed request in a few words (not the adapter's nested reprs)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, ConnectionResetError):
            return "connection reset"
        if isinstance(seen, OSError) and seen.strerror:
            return str(seen.strerror)
        seen = seen.__cause__ or seen.__context__
    reason = getattr(exc, "args", ())
    inner = next((a for a in reason if isinstance(a, BaseException)), None)
    deepest = getattr(inner, "reason", inner)
    if isinstance(deepest, BaseException) and deepest is not exc:
        text = str(deepest).rsplit(": ", 1)[-1]
        return _short(Exception(text))
    return f"{type(exc).__name__}: {_short(exc)}"


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
