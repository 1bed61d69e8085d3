"""The watchdog's own HTTP endpoints: ``/metrics`` (prometheus_client's WSGI app, so content negotiation and gzip
are the library's), ``/healthz``, ``/readyz`` and ``/status`` (:mod:`watchdog.controller.status`).

Liveness never depends on the API server: ``/healthz`` is 200 while a cycle STARTED within 3 scrape intervals
(the loop is alive and attempting, whether or not its cycles succeed: an API outage must not restart the pod
and lose its warm-up), or while the cycle in progress has run less than 10 minutes (a long cycle of many
timing-out pods is slow, not dead; a cycle running longer is stuck and fails it). ``/readyz`` is 200 while a
cycle COMPLETED within 3 intervals and the API server does not refuse the watchdog's credentials (``refusal``:
its last answers were all 401/403, :mod:`watchdog.adapters.kubeauth`) and every source in use reads (a source that
read none of its due pods for 3 cycles in a row is down: :mod:`watchdog.core.sourcehealth`) and, in namespace-only
mode, the pods of at least one watched namespace can be listed (:mod:`watchdog.controller.nsreads`; NotReady shows in
``kubectl get pods`` and ``helm install --wait``, restarts nothing), and its body says why not (the refusal and what
to check, the source down and its first failure, never completed, last completed N s ago; and the last error).

Anyone who reaches the port is served by a bounded server (:class:`HttpServer`): one asyncio event loop in one
thread, whatever the number of clients, so an idle or slow connection costs a few KiB, never a thread. Per
:class:`HttpLimits`: at most ``max_connections`` open at once (a new connection beyond it closes the oldest one
still sending its request, so a flood of idle connections cannot lock a probe out), the request head must be
complete within ``read_timeout_s`` of the accept however its bytes trickle in, and within ``max_head_bytes``;
the response must be taken by the client within ``write_timeout_s``. One request per connection (HTTP/1.0
responses), no request body is read. :meth:`HttpServer.shutdown` cuts every connection at once.

``listenAddress`` ``[::]:PORT`` is dual-stack (one IPv6 socket with ``IPV6_V6ONLY`` off, IPv4 clients arrive as
mapped addresses) and falls back to IPv4 ``0.0.0.0:PORT`` when the kernel has no IPv6.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote, urlsplit
from wsgiref.handlers import SimpleHandler
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import make_wsgi_app

from watchdog.controller.cycle import Watchdog
from watchdog.controller.status import Liveness, document

log = logging.getLogger("watchdog.controller.http")

NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)


@dataclass(frozen=True)
class HttpLimits:
    """Bounds of the watchdog's own HTTP server (enough for Prometheus, the kubelet's probes and a human)."""

    max_connections: int = 64
    read_timeout_s: float = 5.0  # accept -> end of the request head, in total (a dripping client is cut)
    write_timeout_s: float = 10.0  # the whole response handed to the kernel
    max_head_bytes: int = 16 * 1024  # request line + headers (and at most 100 header lines)


PATHS = ("/healthz", "/readyz", "/status")
STALE_INTERVALS = 3  # /healthz and /readyz fail after this many scrape intervals without a cycle start / end
STUCK_S = 600.0  # /healthz also fails when one cycle has been running this long (or 3 intervals, if longer)


class Endpoints:
    """The WSGI application: ``/metrics`` from the watchdog's registry, ``/healthz``, ``/readyz``, ``/status``.
    ``refusal``: why the API server refuses the watchdog's credentials, None while it does not."""

    def __init__(self, watchdog: Watchdog, interval_s: float,
                 refusal: Callable[[], str | None] | None = None) -> None:
        self.watchdog, self.interval_s, self.started = watchdog, interval_s, watchdog.clock()
        self.refusal = refusal
        self.metrics: WSGIApplication = make_wsgi_app(watchdog.metrics.registry)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return self.metrics(environ, start_response)
        if path not in PATHS:
            return _json(start_response, HTTPStatus.NOT_FOUND, {"error": "not found"})
        if environ["REQUEST_METHOD"] != "GET":
            return _json(start_response, HTTPStatus.METHOD_NOT_ALLOWED, {"error": "use GET"}, [("Allow", "GET")])
        wd, now, limit = self.watchdog, self.watchdog.clock(), STALE_INTERVALS * self.interval_s
        if path == "/status":
            live = Liveness(now, wd.last_started, wd.last_success, wd.last_failure)
            return _answer(start_response, HTTPStatus.OK, document(wd.status, live))
        if path == "/healthz":
            started = wd.last_started
            age = now - (started if started is not None else self.started)
            # A long cycle (many pods timing out) is alive, not stuck: its scrapes and API calls are bounded, so
            # only one running past STUCK_S is a loop that will not come back.
            running = wd.in_progress()
            ok = age <= (max(limit, STUCK_S) if running else limit)
            return _json(start_response, HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                         {"ok": ok, "seconds_since_cycle_start": round(age, 1), "cycle_running": running,
                          "limit_s": max(limit, STUCK_S) if running else limit})
        completed, failed = wd.last_success, wd.last_failure
        refused = self.refusal() if self.refusal is not None else None
        down = wd.source_down() or wd.namespaces_down()  # cycles complete while nothing is read: all unknown
        ready = completed is not None and now - completed <= limit and refused is None and down is None
        body: dict[str, object] = {"ready": ready}
        if refused is not None:  # first: a cycle completed from the cache while every request is refused
            body["why"] = refused
        elif down is not None:
            body["why"] = down
        elif completed is None:
            body["why"] = "no cycle has completed yet"
        elif not ready:
            body["why"] = f"the last cycle completed {now - completed:.0f} s ago (limit {limit:g} s)"
        body["seconds_since_completed"] = None if completed is None else round(now - completed, 1)
        if failed is not None and (completed is None or failed[0] > completed):
            body["last_error"], body["seconds_since_error"] = failed[1], round(now - failed[0], 1)
        return _json(start_response, HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, body)


def _json(start_response: StartResponse, status: HTTPStatus, body: object,
          headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    return _answer(start_response, status, json.dumps(body).encode(), headers)


def _answer(start_response: StartResponse, status: HTTPStatus, body: bytes,
            headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(f"{status.value} {status.phrase}", [("Content-Type", "application/json"), *(headers or [])])
    return [body]


class _Handler(SimpleHandler):
    os_environ: dict[str, str] = {}  # noqa: RUF012 - wsgiref would copy the process environment into each request
    server_software = "vllm-stall-watchdog"


class HttpServer:
    """Serves a WSGI ``app`` on a listening socket from one event-loop thread, within ``limits``."""

    def __init__(self, sock: socket.socket, app: WSGIApplication, limits: HttpLimits | None = None) -> None:
        self.socket, self.app, self.limits = sock, app, limits or HttpLimits()
        self.cut = 0  # connections closed early: over the connection limit, too slow, or a request too large
        self._reading: dict[asyncio.StreamWriter, None] = {}  # still sending the request head, oldest first
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._warned_at = -60.0
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="http", daemon=True)

    @property
    def server_address(self) -> tuple[str, int]:
        host, port = self.socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def display_address(self) -> str:
        """``host:port``, the host in brackets when it is IPv6 (``[::]:8080``)."""
        host, port = self.server_address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def serve(self) -> None:
        """Start the event-loop thread; return once it accepts connections."""
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise self._failed

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, cut every open connection and end the thread (at most ``timeout_s``)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
            self._thread.join(timeout_s)

    def server_close(self) -> None:
        self.socket.close()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            server = await asyncio.start_server(self._connection, sock=self.socket, limit=self.limits.max_head_bytes)
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.limits.max_connections:
            if not self._reading:  # every slot is writing a response: this one waits its turn outside
                self._count_cut("over the connection limit")
                writer.transport.abort()
                return
            oldest = next(iter(self._reading))
            del self._reading[oldest]
            oldest.transport.abort()  # its task ends on the lost connection
            self._count_cut("over the connection limit")
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._reading[writer] = None
        done = False
        try:
            done = await self._exchange(reader, writer)
        except TimeoutError:
            self._count_cut("too slow")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client left, or was cut to make room (counted then)
        except Exception:  # never let one client's trouble reach the event loop
            log.exception("serving an HTTP request failed")
        finally:
            self._reading.pop(writer, None)
            self._tasks.discard(task)
            if done:
                writer.close()
            else:
                writer.transport.abort()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request head, answer it; True when the whole answer went out."""
        try:
            async with asyncio.timeout(self.limits.read_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            self._count_cut("request head too large")
            head = b""
            response = _error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        else:
            response = self._respond(head, writer.get_extra_info("peername"))
        self._reading.pop(writer, None)
        writer.transport.set_write_buffer_limits(high=0)  # drain() returns once the kernel has all of it
        writer.write(response)
        async with asyncio.timeout(self.limits.write_timeout_s):
            await writer.drain()
        return bool(head)

    def _respond(self, head: bytes, peer: object) -> bytes:
        environ = self._environ(head, peer)
        if isinstance(environ, HTTPStatus):
            return _error(environ)
        out, errors = io.BytesIO(), io.StringIO()
        _Handler(io.BytesIO(), out, errors, environ, multithread=False).run(self.app)
        if errors.getvalue():
            log.error("HTTP %s %s failed: %s", environ["REQUEST_METHOD"], environ["PATH_INFO"], errors.getvalue())
        return out.getvalue()

    def _environ(self, head: bytes, peer: object) -> WSGIEnvironment | HTTPStatus:
        line, _, rest = head.partition(b"\r\n")
        parts = line.decode("latin-1").split()
        if len(parts) != 3:
            return HTTPStatus.BAD_REQUEST
        method, target, version = parts
        if not version.startswith("HTTP/1."):
            return HTTPStatus.HTTP_VERSION_NOT_SUPPORTED
        try:
            headers = http.client.parse_headers(io.BytesIO(rest))
            url = urlsplit(target)
        except (http.client.HTTPException, ValueError):
            return HTTPStatus.BAD_REQUEST
        host, port = self.server_address
        environ: WSGIEnvironment = {
            "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": unquote(url.path, "latin-1"),
            "QUERY_STRING": url.query, "SERVER_NAME": host, "SERVER_PORT": str(port), "SERVER_PROTOCOL": version,
            "REMOTE_ADDR": peer[0] if isinstance(peer, tuple) else "", "wsgi.url_scheme": "http",
        }
        for name, value in headers.items():
            key = name.upper().replace("-", "_")
            if "_" in name:  # as wsgiref: X_Foo must not pass for X-Foo
                continue
            key = key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key
            environ[key] = f"{environ[key]},{value.strip()}" if key in environ else value.strip()
        return environ

    def _count_cut(self, why: str) -> None:
        self.cut += 1
        now = time.monotonic()
        if now - self._warned_at >= 60:
            self._warned_at = now
            log.warning("HTTP: closed a client connection (%s); %d so far. Limits: %d connections, %.0f s to send "
                        "a request of at most %d bytes", why, self.cut, self.limits.max_connections,
                        self.limits.read_timeout_s, self.limits.max_head_bytes)


def _error(status: HTTPStatus) -> bytes:
    body = json.dumps({"error": status.phrase}).encode()
    return (f"HTTP/1.0 {status.value} {status.phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def listen_socket(address: str) -> socket.socket:
    """A listening TCP socket on ``address`` (``host:port``, IPv6 in brackets). ``[::]`` is dual-stack where the
    kernel allows it and IPv4 ``0.0.0.0`` when the kernel has no IPv6. Raises OSError."""
    where = urlsplit("//" + address)
    host, port = where.hostname, where.port
    if not host or port is None:
        raise OSError(errno.EINVAL, "not host:port")
    if host == "::":
        try:
            return socket.create_server(("::", port), family=socket.AF_INET6,
                                        dualstack_ipv6=socket.has_dualstack_ipv6())
        except OSError as exc:
            if exc.errno not in NO_IPV6:
                raise
            log.warning("no IPv6 on this host (%s): listening on IPv4 0.0.0.0:%d only", exc.strerror or exc, port)
            return socket.create_server(("0.0.0.0", port))
    last: OSError = OSError(errno.EADDRNOTAVAIL, "no address")
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
        try:
            return socket.create_server(sockaddr, family=family)
        except OSError as exc:
            last = exc
    raise last


def start_http(address: str, watchdog: Watchdog, interval_s: float, limits: HttpLimits | None = None, *,
               refusal: Callable[[], str | None] | None = None) -> HttpServer:
    """Serve /metrics, /healthz, /readyz, /status on ``address`` (host:port) from a daemon thread (``refusal``: see
    :class:`Endpoints`). Raises OSError when the address cannot be bound."""
    server = HttpServer(listen_socket(address), Endpoints(watchdog, interval_s, refusal), limits)
    server.serve()
    return server
