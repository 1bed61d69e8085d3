"""A loopback stand-in for Prometheus' instant-query API (``POST /api/v1/query``), for the unit tiers.

It evaluates the shapes of query the watchdog sends (watchdog/core/promql.py) from samples the test adds, as
Prometheus does: ``sum|max|min by (labels) (<expr>)``,
``last_over_time(name{l="v",l!="w"}[60s])`` (the newest
sample in ``(time - range, time]``) and ``timestamp(name{...})`` (the newest sample's time within the 5-minute
lookback), answered as a ``vector``; anything else is a ``bad_data`` error.
``fail`` makes every answer an HTTP status / body of the test's choosing; ``delay_s``
holds each answer back. Every query is recorded (``queries``: (query, time), ``headers``). The real
Prometheus tier is tests/prometheus/.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.parser import text_string_to_metric_families

_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?")
_AGGREGATE = re.compile(r"(sum|max|min) by \(([a-zA-Z0-9_, ]*)\) \((.*)\)")
_LATEST = re.compile(r"last_over_time\((.*)\[([0-9]+)s\]\)")
_TIMESTAMP = re.compile(r"timestamp\((.*)\)")
_LOOKBACK_S = 300.0
Item = tuple[frozenset[tuple[str, str]], list[tuple[float, float]]]
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(!=|=)"((?:[^"\\]|\\.)*)"')


class FakePrometheus:
    def __init__(self) -> None:
        self.series: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
        self.queries: list[tuple[str, float]] = []
        self.headers: list[dict[str, str]] = []
        self.fail: tuple[int, bytes] | None = None
        self.delay_s = 0.0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                query, at = form.get("query", [""])[0], float(form.get("time", ["0"])[0])
                with fake.lock:
                    fake.queries.append((query, at))
                    fake.headers.append(dict(self.headers))
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                status, body = fake.fail or fake.answer(query, at)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (a timeout test)
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 64  # the watchdog sends its queries at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakePrometheus:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def feed(self, text: str, labels: Mapping[str, str], t: float) -> None:
        """Every sample of the exposition ``text``, as Prometheus stores it after scraping it at ``t`` with the
        target ``labels`` added."""
        with self.lock:
            for key, samples in stored(text, labels, t):
                self.series.setdefault(key, []).extend(samples)

    def add(self, name: str, labels: Mapping[str, str], t: float, value: float) -> None:
        """One sample of the series ``name{labels}`` at ``t`` (Unix seconds)."""
        key = frozenset({**labels, "__name__": name}.items())
        with self.lock:
            self.series.setdefault(key, []).append((t, value))

    def answer(self, query: str, at: float) -> tuple[int, bytes]:
        with self.lock:
            items = list(self.series.items())
        rows = evaluate(query, at, items)
        if rows is None:
            return 400, json.dumps({"status": "error", "errorType": "bad_data", "error": f"parse: {query}"}).encode()
        result = [{"metric": labels, "value": [at, _text(value)]} for labels, value in rows]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def stored(text: str, labels: Mapping[str, str], t: float) -> list[Item]:
    """The series of the exposition ``text`` (prometheus_client's parser) as Prometheus stores them after one
    scrape at ``t`` that adds the target ``labels``."""
    return [(frozenset({**s.labels, **labels, "__name__": s.name}.items()), [(t, s.value)])
            for family in text_string_to_metric_families(text) for s in family.samples]


def evaluate(query: str, at: float, items: list[Item]) -> list[tuple[dict[str, str], float]] | None:
    """The rows of ``query`` at ``at`` over ``items`` ((labels incl. __name__, samples)), or None: not a query
    shape the watchdog sends."""
    if match := _AGGREGATE.fullmatch(query):
        inner = evaluate(match.group(3), at, items)
        if inner is None:
            return None
        by = [name.strip() for name in match.group(2).split(",")]
        groups: dict[tuple[tuple[str, str], ...], float] = {}
        for labels, value in inner:
            key = tuple((n, labels[n]) for n in by if labels.get(n))
            old = groups.get(key)
            groups[key] = value if old is None else _combine(match.group(1), old, value)
        return [(dict(key), value) for key, value in groups.items()]
    if match := _LATEST.fullmatch(query):
        return _select(match.group(1), at, float(match.group(2)), items, stamp=False)
    if match := _TIMESTAMP.fullmatch(query):
        return _select(match.group(1), at, _LOOKBACK_S, items, stamp=True)
    return None


def _select(selector: str, at: float, seconds: float, items: list[Item], stamp: bool,
            ) -> list[tuple[dict[str, str], float]] | None:
    match = _SELECTOR.fullmatch(selector)
    if match is None:
        return None
    name, inner = match.group(1), match.group(2) or ""
    matchers = [(n, op, v.replace('\\"', '"').replace("\\\\", "\\")) for n, op, v in _MATCHER.findall(inner)]
    out = []
    for key, samples in items:
        labels = dict(key)
        if labels["__name__"] != name:
            continue
        if not all((labels.get(n, "") == v) == (op == "=") for n, op, v in matchers):
            continue
        inside = [(t, v) for t, v in sorted(samples) if at - seconds < t <= at]
        if inside:
            t, value = inside[-1]
            out.append(({k: v for k, v in labels.items() if k != "__name__"}, t if stamp else value))
    return out


def _combine(op: str, old: float, new: float) -> float:
    if op == "sum":
        return old + new
    if op == "max":
        return new if old != old or new > old else old
    return new if old != old or new < old else old


def _text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
