"""Raw loopback HTTP servers for the scrape transport tests (tests/adapters/test_scrape.py, test_ascrape.py): the
``serve`` fixture (127.0.0.1, ephemeral ports; each connection runs a handler), handlers that answer, record or never
answer, and the reason check of a failed scrape. Not a test module: test modules import from here, never from each
other."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from watchdog.adapters.ascrape import AsyncScraper as Scraper
from watchdog.adapters.scrape_errors import REASONS, ScrapeError

BODY = b'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'


def reason_of(scraper: Scraper, url: str) -> ScrapeError:
    with pytest.raises(ScrapeError) as info:
        scraper.fetch(url)
    assert info.value.reason in REASONS and "\n" not in str(info.value)
    return info.value


# ---------------------------------------------------------------- loopback servers

Handler = Callable[[socket.socket, threading.Event], None]


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], str]]:
    """Start a raw TCP server on 127.0.0.1 (ephemeral port); each connection runs ``handler(conn, stop)``."""
    stop = threading.Event()
    servers: list[socket.socket] = []

    def start(handler: Handler) -> str:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        server.settimeout(0.2)
        servers.append(server)

        def accept_loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                threading.Thread(target=_run, args=(handler, conn, stop), daemon=True).start()

        threading.Thread(target=accept_loop, daemon=True).start()
        return f"http://127.0.0.1:{server.getsockname()[1]}/metrics"

    yield start
    stop.set()
    for server in servers:
        server.close()


def _run(handler: Handler, conn: socket.socket, stop: threading.Event) -> None:
    with conn, contextlib.suppress(OSError):
        handler(conn, stop)


def read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk


def respond(body: bytes, headers: str = "") -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while True:  # keep-alive: answer every request on this connection
            read_request(conn)
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body)
            if stop.is_set():
                return

    return handler


@dataclass
class Seen:
    """What a loopback server received: one request head (request line + headers) per request."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    connections: int = 0


def _read_head(conn: socket.socket) -> tuple[str, dict[str, str]] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
    line, *lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    return line, {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines)}


def answer(seen: Seen, *responses: bytes | None) -> Handler:
    """Record each request; the n-th connection gets ``responses[n]`` (the last one repeats), None = a reset."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        n = seen.connections
        seen.connections += 1
        head = _read_head(conn)
        if head is None:
            return
        seen.requests.append(head)
        response = responses[min(n, len(responses) - 1)]
        if response is None:  # an RST instead of an answer
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        conn.sendall(response)

    return handler


def http(status: str, body: bytes = b"", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


def never_answer(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(10)
