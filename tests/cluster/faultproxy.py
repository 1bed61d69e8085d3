"""A fault-injecting HTTPS proxy between a watchdog process and the real kube-apiserver (cluster tier only).

The watchdog's kubeconfig points here instead of at the API server. The proxy terminates TLS on 127.0.0.1 with
the API server's own serving certificate and key (``--cert-dir``: the certificate chains to the self-signed CA in
``apiserver.crt`` that every kubeconfig of the tier trusts, and names 127.0.0.1), and forwards each request over
TLS to the API server, every header (``Authorization`` included) passed through but the hop-by-hop ones, so the
API server authenticates and authorizes the ServiceAccount exactly as without the proxy (and audits it). Answers
are streamed back: a WATCH flows event by event (re-chunked); a whole answer keeps the connection alive.

:class:`Rule` s, matched in order by method and path regex (and optionally a substring of the request body), each
firing at most ``times`` times, inject the faults of a lost or refused write:

- ``drop``: forward (the API server applies it), then close the connection without an answer ("applied, answer
  lost": the client sees the connection reset, as on a timeout);
- ``status_after``: forward (applied), then answer ``status`` instead of the real answer ("5xx after apply");
- ``status``: answer ``status`` without forwarding ("5xx/429 without apply");
- ``hold``: hold the request ``hold_s`` seconds before forwarding it (``before``), or forward at once and hold
  the answer (``after``); the held answer is then delivered to a client that has usually given up ("timeout
  after apply");
- ``freeze_s`` (any forwarding action): right after the API server answered, freeze the proxy for that long: every
  request arriving meanwhile is held until the freeze ends and then dropped unforwarded, open WATCH streams stall,
  and this request's own answer is held until the freeze ends ("the API frozen right after applying a DELETE").

Every request is recorded in :attr:`FaultProxy.seen` (method, path, what was done, when) so a scenario can tell
what the watchdog SENT from what the API server applied (its audit log).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
              "content-length", "host"}
REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


@dataclass
class Rule:
    """``method`` and ``path``: regexes (``re.fullmatch`` on the method, ``re.search`` on the path without the
    query string); ``body``: a substring the request body must contain (None: any); ``times``: how often it fires
    (None: every match); see the module docstring for ``action``."""

    method: str
    path: str
    action: str  # drop | status_after | status | hold
    status: int = 503
    hold_s: float = 0.0
    when: str = "after"  # hold: "before" (not yet applied) or "after" (applied) forwarding
    body: str | None = None
    times: int | None = 1
    freeze_s: float = 0.0
    fired: list[float] = field(default_factory=list)  # monotonic times it fired

    def __post_init__(self) -> None:
        if self.action not in ("drop", "status_after", "status", "hold"):
            raise ValueError(f"unknown action {self.action!r}")

    def matches(self, method: str, path: str, body: bytes) -> bool:
        if self.times is not None and len(self.fired) >= self.times:
            return False
        if not re.fullmatch(self.method, method) or not re.search(self.path, path):
            return False
        return self.body is None or self.body.encode() in body


@dataclass(frozen=True)
class Seen:
    t: float  # monotonic, when the request arrived
    method: str
    path: str  # without the query string
    query: str
    done: str  # "forwarded", or the rule's action (and "frozen": held by a freeze, never forwarded)
    status: int | None  # the status the client was sent (None: no answer)
    body: bytes = b""  # the request body (DeleteOptions, a ConfigMap, ...)


class FaultProxy:
    """Start with :meth:`start`; ``url`` is what a kubeconfig's ``server`` names; :meth:`stop` ends everything
    (held requests and streams included)."""

    def __init__(self, upstream: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        split = urlsplit(upstream)
        assert split.scheme == "https" and split.hostname and split.port, upstream
        self.upstream_host, self.upstream_port = split.hostname, split.port
        self.client_tls = ssl.create_default_context(cafile=str(ca_file))
        self.server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_tls.load_cert_chain(str(cert_file), str(key_file))
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self.frozen_until = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sockets: set[Any] = set()  # client and upstream sockets, closed on stop
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- the test's side ---------------------------------------------------------------------------------------
    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def freeze(self, seconds: float) -> None:
        with self._lock:
            self.frozen_until = max(self.frozen_until, time.monotonic() + seconds)

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        """What reached the proxy (in order), filtered by method and a path regex."""
        return [s for s in list(self.seen) if (method is None or s.method == method)
                and (path is None or re.search(path, s.path))]

    def start(self) -> FaultProxy:
        proxy = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def finish_request(self, request: Any, client_address: Any) -> None:  # in the request's own thread
                try:
                    request.settimeout(30)
                    tls = proxy.server_tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    return
                tls.settimeout(None)
                proxy._track(tls)
                try:
                    super().finish_request(tls, client_address)
                finally:
                    proxy._untrack(tls)

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that went away mid-answer is what these faults are about

        self._server = Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self  # type: ignore[attr-defined]
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def describe(self, last: int = 60) -> str:
        """The last requests, one line each (for a failing test's report)."""
        t0 = self.seen[0].t if self.seen else 0.0
        return "\n".join(f"  +{s.t - t0:7.2f}s {s.method:6} {s.path}{'?' + s.query if s.query else ''} -> {s.done}"
                         f" {s.status if s.status is not None else '(no answer)'}" for s in self.seen[-last:])

    # -- internals ---------------------------------------------------------------------------------------------
    def _track(self, sock: Any) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _untrack(self, sock: Any) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def _rule_for(self, method: str, path: str, body: bytes) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path, body):
                    rule.fired.append(time.monotonic())
                    return rule
        return None

    def frozen(self) -> bool:
        return time.monotonic() < self.frozen_until

    def sleep(self, seconds: float) -> None:
        self._stopping.wait(max(0.0, seconds))

    def wait_thaw(self) -> None:
        while self.frozen() and not self._stopping.is_set():
            self.sleep(min(0.1, self.frozen_until - time.monotonic()))

    def upstream(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.upstream_host, self.upstream_port, context=self.client_tls,
                                           timeout=120)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    @property
    def proxy(self) -> FaultProxy:
        return self.server.proxy  # type: ignore[attr-defined, no-any-return]

    def _handle(self) -> None:
        proxy = self.proxy
        arrived = time.monotonic()
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""

        def seen(done: str, status: int | None) -> None:
            proxy.seen.append(Seen(arrived, self.command, path, query, done, status, body))

        if proxy.frozen():  # a frozen API server: held until the freeze ends, never applied, no answer
            proxy.wait_thaw()
            seen("frozen", None)
            self._drop()
            return
        rule = proxy._rule_for(self.command, path, body)
        if rule is not None and rule.action == "status":
            seen("status", rule.status)
            self._status(rule.status)
            return
        if rule is not None and rule.action == "hold" and rule.when == "before":
            proxy.sleep(rule.hold_s)
        try:
            upstream = proxy.upstream()
            upstream.connect()
        except OSError as exc:
            seen(f"upstream failed: {exc}", 502)
            self._status(502)
            return
        proxy._track(upstream.sock)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            upstream.request(self.command, self.path, body=body if length else None, headers=headers)
            answer = upstream.getresponse()
            if rule is not None and rule.freeze_s:
                proxy.freeze(rule.freeze_s)
            if rule is None or (rule.action == "hold" and rule.when == "before"):
                seen("forwarded" if rule is None else "held before forwarding", answer.status)
                self._relay(answer)
                return
            data = answer.read()  # applied: the API server answered; the client gets no answer, another, or late
            if rule.action == "drop":
                seen("forwarded, answer dropped", None)
                self._drop()
            elif rule.action == "status_after":
                seen(f"forwarded ({answer.status}), answered", rule.status)
                self._status(rule.status)
            else:  # hold after: the real answer, late (usually to a client that gave up)
                proxy.sleep(rule.hold_s)
                proxy.wait_thaw()
                seen(f"forwarded, answer held {rule.hold_s:g} s", answer.status)
                self._send_whole(answer.status, answer.getheaders(), data)
        finally:
            proxy._untrack(upstream.sock)
            upstream.close()

    def _relay(self, answer: http.client.HTTPResponse) -> None:
        headers = [(k, v) for k, v in answer.getheaders() if k.lower() not in HOP_BY_HOP]
        if answer.getheader("Content-Length") is not None or self.command == "HEAD" or answer.status in (204, 304):
            self._send_whole(answer.status, headers, answer.read())
            return
        self.send_response_only(answer.status, answer.reason)  # a stream (WATCH): chunk by chunk
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        while True:
            chunk = answer.read1(65536)
            self.proxy.wait_thaw()  # a frozen API server sends nothing
            if not chunk:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_whole(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response_only(status)
        for k, v in headers:
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _status(self, status: int) -> None:
        reason = REASONS.get(status, "InternalError")
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": f"injected by the test's fault proxy ({status})", "reason": reason,
                           "code": status}).encode()
        headers = [("Content-Type", "application/json")] + ([("Retry-After", "1")] if status == 429 else [])
        self._send_whole(status, headers, body)

    def _drop(self) -> None:
        """Close the connection without an answer (the client sees it reset or closed)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
