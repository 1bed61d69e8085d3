"""Scraper: the HTTP contract (via ``responses``) and the bounds (via real loopback servers)."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import pytest
import requests
import responses

from watchdog.adapters.scrape import REASONS, ScrapeError, ScrapeLimits, Scraper

URL = "http://10.0.0.7:8000/metrics"
BODY = b'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'


def reason_of(scraper: Scraper, url: str) -> ScrapeError:
    with pytest.raises(ScrapeError) as info:
        scraper.fetch(url)
    assert info.value.reason in REASONS and "\n" not in str(info.value)
    return info.value


# ---------------------------------------------------------------- HTTP contract (responses)


@responses.activate
def test_get_with_gzip_accept_no_credentials_no_proxy_from_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    netrc = tmp_path / "netrc"  # type: ignore[operator]
    netrc.write_text("machine 10.0.0.7 login admin password hunter2\n")
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    responses.add(responses.GET, URL, body=BODY)
    assert Scraper().fetch(URL) == BODY
    (call,) = responses.calls
    assert call.request.method == "GET"
    assert call.request.headers["Accept-Encoding"] == "gzip"
    assert not {"Authorization", "Proxy-Authorization", "Cookie"} & set(call.request.headers)
    assert call.request.headers["User-Agent"].startswith("vllm-stall-watchdog/")


@responses.activate
def test_gzip_body_is_decoded() -> None:
    responses.add(responses.GET, URL, body=gzip.compress(BODY * 1000), headers={"Content-Encoding": "gzip"})
    assert Scraper().fetch(URL) == BODY * 1000


@responses.activate
def test_redirect_is_an_error_and_not_followed() -> None:
    responses.add(responses.GET, URL, status=302, headers={"Location": "http://elsewhere.invalid/metrics"})
    error = reason_of(Scraper(), URL)
    assert error.reason == "http_status" and "302" in str(error) and "not followed" in str(error)
    assert len(responses.calls) == 1


@responses.activate
@pytest.mark.parametrize("status", [404, 500, 503])
def test_non_2xx_is_http_status(status: int) -> None:
    responses.add(responses.GET, URL, status=status, body=b"nope")
    error = reason_of(Scraper(), URL)
    assert error.reason == "http_status" and str(error).startswith(f"HTTP {status}")


@responses.activate
@pytest.mark.parametrize(
    ("body", "encoding"),
    [(BODY, "br"), (b"not gzip at all", "gzip"), (gzip.compress(BODY * 100)[:-20], "gzip")],
    ids=["unsupported-encoding", "corrupt-gzip", "truncated-gzip"],
)
def test_bad_encoding(body: bytes, encoding: str) -> None:
    responses.add(responses.GET, URL, body=body, headers={"Content-Encoding": encoding})
    assert reason_of(Scraper(), URL).reason == "bad_encoding"


@responses.activate
def test_cap_applies_to_plain_body() -> None:
    responses.add(responses.GET, URL, body=b"x" * 2001)
    assert reason_of(Scraper(ScrapeLimits(max_bytes=2000)), URL).reason == "too_large"
    responses.replace(responses.GET, URL, body=b"x" * 2000)
    assert len(Scraper(ScrapeLimits(max_bytes=2000)).fetch(URL)) == 2000


@responses.activate
def test_refused_is_retried_once_then_reported() -> None:
    refused = requests.ConnectionError(ConnectionRefusedError(111, "Connection refused"))
    responses.add(responses.GET, URL, body=refused)
    error = reason_of(Scraper(), URL)
    assert (error.reason, str(error)) == ("refused", "connection refused")
    assert len(responses.calls) == 2


@responses.activate
def test_reset_then_success_uses_the_retry() -> None:
    responses.add(responses.GET, URL, body=requests.ConnectionError(ConnectionResetError(104, "reset")))
    responses.add(responses.GET, URL, body=BODY)
    assert Scraper().fetch(URL) == BODY
    assert len(responses.calls) == 2


@responses.activate
@pytest.mark.parametrize(
    "url", ["ftp://10.0.0.7/metrics", "http://admin:pw@10.0.0.7:8000/metrics", "http:///metrics", "10.0.0.7:8000"]
)
def test_unsupported_urls_are_refused_before_any_request(url: str) -> None:
    assert reason_of(Scraper(), url).reason == "connection"
    assert len(responses.calls) == 0


def test_error_reasons_are_checked() -> None:
    with pytest.raises(ValueError):
        ScrapeError("weird", "x")
    assert str(ScrapeError("timeout", "timeout after\n3.0 s")) == "timeout after 3.0 s"
    with pytest.raises(ValueError):
        ScrapeLimits(deadline_s=0)


# ---------------------------------------------------------------- bounds (real loopback servers)

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


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk


def respond(body: bytes, headers: str = "") -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while True:  # keep-alive: answer every request on this connection
            _read_request(conn)
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body)
            if stop.is_set():
                return

    return handler


def never_answer(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(10)


def drip(headers_first: bool) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        _read_request(conn)
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
        if headers_first:
            conn.sendall(head)
        for byte in (b"" if headers_first else head) + b"x" * 100:
            conn.sendall(bytes([byte]))
            if stop.wait(1.0):
                return

    return handler


def timed(scraper: Scraper, url: str) -> tuple[ScrapeError, float]:
    start = time.monotonic()
    error = reason_of(scraper, url)
    return error, time.monotonic() - start


def test_server_that_never_answers_times_out_at_the_deadline(serve: Callable[[Handler], str]) -> None:
    error, elapsed = timed(Scraper(ScrapeLimits(deadline_s=1.0)), serve(never_answer))
    assert (error.reason, str(error)) == ("timeout", "timeout after 1.0 s")
    assert 0.9 <= elapsed < 1.0 + 1.5


@pytest.mark.parametrize("headers_first", [True, False], ids=["drip-body", "drip-headers"])
def test_drip_one_byte_a_second_times_out_at_the_deadline(serve: Callable[[Handler], str], headers_first: bool) -> None:
    error, elapsed = timed(Scraper(ScrapeLimits(deadline_s=1.5)), serve(drip(headers_first)))
    assert error.reason == "timeout"
    assert 1.4 <= elapsed < 1.5 + 1.5


def test_ten_megabyte_body_is_too_large(serve: Callable[[Handler], str]) -> None:
    error, _elapsed = timed(Scraper(), serve(respond(b"#" * (10 * 1024 * 1024))))
    assert error.reason == "too_large" and "8388608" in str(error)


def test_gzip_bomb_stops_at_the_cap_with_bounded_memory(serve: Callable[[Handler], str]) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1024 * 1024)
    bomb = b"".join(packer.compress(zeros) for _ in range(64)) + packer.flush()  # 64 MiB inflated
    assert len(bomb) < 100_000
    url = serve(respond(bomb, "Content-Encoding: gzip\r\n"))
    cap = 1024 * 1024
    tracemalloc.start()
    try:
        error = reason_of(Scraper(ScrapeLimits(max_bytes=cap)), url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.reason == "too_large"
    assert peak < 4 * cap  # never near the 64 MiB the bomb inflates to


def test_refused_port(serve: Callable[[Handler], str]) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    error, elapsed = timed(Scraper(), f"http://127.0.0.1:{port}/metrics")
    assert (error.reason, str(error)) == ("refused", "connection refused")
    assert elapsed < 1.0


def test_real_server_gzip_keepalive_and_threads(serve: Callable[[Handler], str]) -> None:
    url = serve(respond(gzip.compress(BODY), "Content-Encoding: gzip\r\n"))
    scraper = Scraper()
    results: list[bytes] = []

    def work() -> None:
        for _ in range(3):
            results.append(scraper.fetch(url))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [BODY] * 12
    assert len(scraper._sessions) == 4  # one session per thread
    scraper.close()
    assert scraper._sessions == [] and scraper.fetch(url) == BODY
    scraper.close()
