"""The HTTP side of a simulated pod: uvicorn-like keep-alive, gzip on request, /metrics (``?name[]=`` renders only
those samples, as prometheus_client's filter in a current vLLM does), /health, and the simulation-only /sim/mode
control endpoint; "hang" mode holds requests unanswered."""

from __future__ import annotations

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4


class _Pod(Protocol):
    """What the handler needs from a SimPod."""

    scrapes: int
    _stopping: threading.Event

    @property
    def mode(self) -> str: ...
    def exposition(self) -> bytes: ...
    def state(self) -> dict[str, Any]: ...
    def set_mode(self, mode: str, *, wedge_after_s: float | None = None) -> None: ...


def restrict(body: bytes, names: set[str]) -> bytes:
    """``body`` (text format 0.0.4) with only the samples named ``names`` and the HELP/TYPE lines of their families,
    as prometheus_client renders ``/metrics?name[]=...`` (a current vLLM's filter)."""
    out: list[bytes] = []
    header: list[bytes] = []  # the HELP/TYPE lines of the family being read, written before its first kept sample
    for line in body.split(b"\n"):
        if line.startswith(b"#"):
            header = [] if line.startswith(b"# HELP ") else header
            header.append(line)
        elif line and line.split(b"{", 1)[0].split(b" ", 1)[0].decode(errors="replace") in names:
            out.extend(header)
            header = []
            out.append(line)
    return b"\n".join(out) + b"\n" if out else b""


class SimServer(ThreadingHTTPServer):
    daemon_threads, block_on_close = True, False
    pod: _Pod

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients that hang up are not news
            super().handle_error(request, client_address)


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like uvicorn
    timeout = 10  # idle keep-alive connections are dropped after this many seconds
    server_version, sys_version = "uvicorn", ""

    def log_message(self, *_: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        gzipped = "gzip" in self.headers.get("Accept-Encoding", "") and len(body) > 0
        if gzipped:
            body = gzip.compress(body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        self.wfile.write(body)

    def _hung(self) -> bool:
        """In "hang" mode (any path but /sim/*), hold the request unanswered until the mode changes; True if so."""
        pod: _Pod = self.server.pod  # type: ignore[attr-defined]
        if pod.mode != "hang" or urlsplit(self.path).path.startswith("/sim/"):
            return False
        while pod.mode == "hang" and not pod._stopping.wait(0.05):
            pass
        self.close_connection = True
        return True

    def _stopped(self) -> bool:
        """The pod was stopped: a request on a connection kept alive from before gets no answer (the connection
        is closed), as from a process that exited; True if so."""
        pod: _Pod = self.server.pod  # type: ignore[attr-defined]
        if pod._stopping.is_set():
            self.close_connection = True
            return True
        return False

    def do_other(self) -> None:
        if not self._stopped() and not self._hung():
            self._send(405, b'{"detail":"Method Not Allowed"}', "application/json")

    do_DELETE = do_PUT = do_PATCH = do_other

    def do_GET(self) -> None:
        pod: _Pod = self.server.pod  # type: ignore[attr-defined]
        path = urlsplit(self.path).path
        if self._stopped() or self._hung():
            return
        if path == "/metrics":
            names = parse_qs(urlsplit(self.path).query).get("name[]")
            body = pod.exposition() if not names else restrict(pod.exposition(), set(names))
            pod.scrapes += 1
            self._send(200, body, CONTENT_TYPE_PLAIN_0_0_4)
        elif path == "/health":
            self._send(200, b"", "application/json")
        elif path == "/sim/mode":
            self._send(200, json.dumps(pod.state()).encode(), "application/json")
        else:
            self._send(404, b'{"detail":"Not Found"}', "application/json")

    def do_POST(self) -> None:
        pod: _Pod = self.server.pod  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._stopped() or self._hung():
            return
        if url.path != "/sim/mode":
            self._send(404, b'{"detail":"Not Found"}', "application/json")
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            after = float(query["wedge_after"]) if "wedge_after" in query else None
            pod.set_mode(query.get("mode", ""), wedge_after_s=after)
        except ValueError as e:
            self._send(400, json.dumps({"detail": str(e)}).encode(), "application/json")
            return
        self._send(200, json.dumps(pod.state()).encode(), "application/json")
