"""The watchdog's own HTTP endpoints: ``/metrics`` (prometheus_client exposition of its registry),
``/healthz`` (503 once no cycle completed for 3 intervals) and ``/readyz`` (200 once a cycle completed)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from watchdog.controller.cycle import Watchdog


class _Handler(BaseHTTPRequestHandler):
    watchdog: Watchdog
    interval_s: float
    started: float

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.watchdog.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            last = self.watchdog.last_success
            age = self.watchdog.clock() - (last if last is not None else self.started)
            ok = age <= 3 * self.interval_s
            self._send(200 if ok else 503, json.dumps({"ok": ok, "seconds_since_cycle": round(age, 1)}).encode())
        elif path == "/readyz":
            ready = self.watchdog.last_success is not None
            self._send(200 if ready else 503, json.dumps({"ready": ready}).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def start_http(address: str, watchdog: Watchdog, interval_s: float) -> ThreadingHTTPServer:
    """Serve /metrics, /healthz, /readyz on ``address`` (host:port) from a daemon thread."""
    host, _, port = address.rpartition(":")
    handler = type("Handler", (_Handler,), {"watchdog": watchdog, "interval_s": interval_s,
                                            "started": watchdog.clock()})
    server = ThreadingHTTPServer((host.strip("[]"), int(port)), handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
