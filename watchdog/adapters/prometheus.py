"""I/O: bounded instant queries to a Prometheus HTTP API (``source: prometheus``); decides nothing.

:meth:`PrometheusClient.query` POSTs one PromQL expression to ``<url>/api/v1/query`` with ``time=<Unix
seconds>`` and returns the decoded series (labels, samples as (Unix seconds, value)), for a ``matrix`` answer
(range selectors: every raw sample) or a ``vector`` answer (one sample each). It raises
:class:`PrometheusError` (one line, never a traceback for the caller to print) when Prometheus is unreachable,
answers a non-2xx status, takes longer than the total deadline (``timeout_s``, body included: a dripping
server is cut by the same deadline guard as a scrape), sends a body over ``max_bytes``, answers ``status:
error``, adds ``warnings`` (a partial answer: Thanos/Mimir with a store down) or sends anything that is not
the documented JSON.

The request: no redirects, nothing from the environment (``trust_env`` off: no proxies, netrc or CA bundle
variables), ``Accept-Encoding: identity`` (no decompression at all), ``Authorization: Bearer <token>`` read
from ``bearer_token_file`` at every query (a projected token rotates), TLS verified against ``ca_file`` when
set (else the system store). :meth:`query_many` runs several queries at once (one thread each, at most 8).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any

import requests
import urllib3.exceptions

from watchdog import __version__
from watchdog.adapters.deadline import ACTIVE, DeadlineGuard, GuardedAdapter
from watchdog.core.promql import Series, url_problem

__all__ = ["PrometheusClient", "PrometheusError", "PrometheusLimits"]

_CHUNK = 64 * 1024
_MAX_PARALLEL = 8


class PrometheusError(Exception):
    """A query failed; ``str()`` is one line saying why."""

    def __init__(self, detail: str) -> None:
        super().__init__(" ".join(str(detail).split())[:400])


@dataclass(frozen=True)
class PrometheusLimits:
    """Where Prometheus is and how one query is bounded (seconds, bytes)."""

    url: str
    timeout_s: float = 5.0
    max_bytes: int = 32 << 20
    bearer_token_file: str | None = None
    ca_file: str | None = None


class PrometheusClient:
    """Instant queries against one Prometheus; thread-safe (a session per call)."""

    def __init__(self, limits: PrometheusLimits) -> None:
        problem = url_problem(limits.url)
        if problem:
            raise ValueError(f"Prometheus URL {limits.url!r} {problem}")
        self.limits = limits
        self.endpoint = limits.url.rstrip("/") + "/api/v1/query"

    def close(self) -> None:
        """Nothing is kept between queries (one session per query)."""

    def query_many(self, queries: Sequence[str], at: float) -> list[list[Series]]:
        """:meth:`query` for each of ``queries`` at once; raises the first :class:`PrometheusError`."""
        if len(queries) <= 1:
            return [self.query(q, at) for q in queries]
        with ThreadPoolExecutor(max_workers=min(_MAX_PARALLEL, len(queries)),
                                thread_name_prefix="prometheus") as pool:
            futures = [pool.submit(self.query, q, at) for q in queries]
            return [f.result() for f in futures]

    def query(self, promql: str, at: float) -> list[Series]:
        """Run ``promql`` as an instant query at ``at`` (Unix seconds); the decoded series."""
        body = self._post(promql, at)
        return decode(body)

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"vllm-stall-watchdog/{__version__}", "Accept": "application/json",
                   "Accept-Encoding": "identity", "Content-Type": "application/x-www-form-urlencoded"}
        if self.limits.bearer_token_file:
            try:
                with open(self.limits.bearer_token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise PrometheusError(f"cannot read the bearer token file {self.limits.bearer_token_file}: "
                                      f"{getattr(exc, 'strerror', None) or exc}") from None
            if not token or any(c in token for c in "\r\n"):
                raise PrometheusError(f"the bearer token file {self.limits.bearer_token_file} holds no token")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _post(self, promql: str, at: float) -> bytes:
        limits = self.limits
        deadline = time.monotonic() + limits.timeout_s
        guard = DeadlineGuard(deadline)
        ACTIVE.guard = guard
        session = requests.Session()
        session.trust_env = False
        adapter = GuardedAdapter(pool_connections=1, pool_maxsize=1, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        response: requests.Response | None = None
        try:
            request = requests.Request("POST", self.endpoint, headers=self._headers(),
                                       data={"query": promql, "time": f"{at:.3f}"}).prepare()
            response = adapter.send(request, stream=True, timeout=(limits.timeout_s, limits.timeout_s),
                                    verify=limits.ca_file or True)
            return self._read(response, guard)
        except PrometheusError:
            raise
        except (requests.RequestException, urllib3.exceptions.HTTPError, HTTPException, OSError, ValueError) as exc:
            if guard.fired or isinstance(exc, requests.exceptions.Timeout):
                raise PrometheusError(f"Prometheus {limits.url}: no answer within {limits.timeout_s:g} s") from None
            raise PrometheusError(f"Prometheus {limits.url} unreachable: {type(exc).__name__}: "
                                  f"{_short(exc)}") from None
        finally:
            ACTIVE.guard = None
            guard.disarm()
            if response is not None:
                response.close()
            session.close()

    def _read(self, response: requests.Response, guard: DeadlineGuard) -> bytes:
        cap = self.limits.max_bytes
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", ""):
            raise PrometheusError(f"Prometheus answered with Content-Encoding {encoding!r} (identity was asked)")
        parts: list[bytes] = []
        size = 0
        while True:
            if guard.fired or time.monotonic() >= guard.deadline:
                raise PrometheusError(f"Prometheus {self.limits.url}: no answer within {self.limits.timeout_s:g} s")
            chunk = response.raw.read1(_CHUNK, decode_content=False)
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                raise PrometheusError(f"Prometheus answer larger than prometheusMaxBytes ({cap} bytes)")
            parts.append(chunk)
        if guard.fired:
            raise PrometheusError(f"Prometheus {self.limits.url}: no answer within {self.limits.timeout_s:g} s")
        body = b"".join(parts)
        if not 200 <= response.status_code < 300:
            detail = _error_text(body)
            raise PrometheusError(f"Prometheus answered HTTP {response.status_code}"
                                  + (f": {detail}" if detail else "")
                                  + (" (redirect not followed)" if 300 <= response.status_code < 400 else ""))
        return body


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return f"{doc.get('errorType', '')}: {doc['error'][:200]}"
    return ""


def decode(body: bytes) -> list[Series]:
    """The series of one ``/api/v1/query`` answer; raises :class:`PrometheusError` on anything else than a
    successful ``matrix`` or ``vector`` answer without warnings."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise PrometheusError("Prometheus answer is not JSON") from None
    if not isinstance(doc, dict):
        raise PrometheusError("Prometheus answer is not a JSON object")
    if doc.get("status") != "success":
        raise PrometheusError(f"Prometheus answered status {doc.get('status')!r}: "
                              f"{str(doc.get('errorType', ''))[:50]}: {str(doc.get('error', ''))[:200]}")
    if doc.get("warnings"):
        raise PrometheusError(f"Prometheus answered with warnings (a partial answer): {str(doc['warnings'])[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PrometheusError("Prometheus answer has no data.result list")
    kind = data.get("resultType")
    if kind not in ("matrix", "vector"):
        raise PrometheusError(f"Prometheus answered a {kind!r}, not a matrix or vector")
    return [_series(item, kind) for item in data["result"]]


def _series(item: Any, kind: str) -> Series:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise PrometheusError("Prometheus answer has a series without its labels")
    labels: Mapping[str, Any] = item["metric"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise PrometheusError("Prometheus answer has a label that is not a string")
    raw = item.get("values") if kind == "matrix" else [item.get("value")]
    if not isinstance(raw, list):
        raise PrometheusError("Prometheus answer has a series without samples")
    return dict(labels), [_sample(pair) for pair in raw]


def _sample(pair: Any) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2 or isinstance(pair[0], bool) or not isinstance(pair[1], str):
        raise PrometheusError("Prometheus answer has a sample that is not [time, \"value\"]")
    try:
        t, value = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise PrometheusError("Prometheus answer has a sample that is not a number") from None
    if not math.isfinite(t):
        raise PrometheusError("Prometheus answer has a sample time that is not finite")
    return t, value
