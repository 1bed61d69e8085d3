"""A loopback stand-in for Prometheus' instant-query API (``POST /api/v1/query``), for the unit tiers.

It answers the range selectors the watchdog sends (``name{l="v",l!="w"}[60s]``) from samples the test adds,
as a ``matrix`` with every sample in ``(time - range, time]``, exactly as Prometheus does; anything else is a
``bad_data`` error. ``fail`` makes every answer an HTTP status / body of the test's choosing; ``delay_s``
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

_QUERY = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\[([0-9]+)s\]")
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

    def add(self, name: str, labels: Mapping[str, str], t: float, value: float) -> None:
        """One sample of the series ``name{labels}`` at ``t`` (Unix seconds)."""
        key = frozenset({**labels, "__name__": name}.items())
        with self.lock:
            self.series.setdefault(key, []).append((t, value))

    def answer(self, query: str, at: float) -> tuple[int, bytes]:
        match = _QUERY.fullmatch(query)
        if match is None:
            return 400, json.dumps({"status": "error", "errorType": "bad_data", "error": f"parse: {query}"}).encode()
        name, inner, seconds = match.group(1), match.group(2) or "", float(match.group(3))
        matchers = [(n, op, v.replace('\\"', '"').replace("\\\\", "\\")) for n, op, v in _MATCHER.findall(inner)]
        result = []
        with self.lock:
            items = list(self.series.items())
        for key, samples in items:
            labels = dict(key)
            if labels["__name__"] != name:
                continue
            if not all((labels.get(n, "") == v) == (op == "=") for n, op, v in matchers):
                continue
            values = [[t, _text(v)] for t, v in sorted(samples) if at - seconds < t <= at]
            if values:
                result.append({"metric": labels, "values": values})
        return 200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def _text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
