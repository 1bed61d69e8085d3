"""The scrape transport (AsyncScraper, called synchronously here as `check` and the confirmation call it): the HTTP
contract and the bounds, against real loopback servers (127.0.0.1, ephemeral ports)."""

from __future__ import annotations

import contextlib
import gzip
import socket
import ssl
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import builders
import pytest
from loopback_kit import (
    BODY,
    Handler,
    Seen,
    answer,
    http,
    never_answer,
    read_request,
    reason_of,
    respond,
    serve,
)

from watchdog.adapters import connect
from watchdog.adapters.ascrape import AsyncScraper as Scraper
from watchdog.adapters.scrape_errors import ScrapeError

__all__ = ["serve"]  # the loopback server fixture (loopback_kit.py), a parameter below

# ---------------------------------------------------------------- HTTP contract


@pytest.mark.parametrize("encoding", [None, "identity", "gzip"])
def test_get_asks_for_the_encoding_no_credentials_no_proxy_from_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object, serve: Callable[[Handler], str], encoding: str | None
) -> None:
    target, proxy = Seen(), Seen()
    url = serve(answer(target, http("200 OK", BODY)))
    proxy_url = serve(answer(proxy, http("200 OK", b"from the proxy")))[: -len("/metrics")]
    netrc = tmp_path / "netrc"  # type: ignore[operator]
    netrc.write_text("machine 127.0.0.1 login admin password hunter2\n")
    monkeypatch.setenv("NETRC", str(netrc))
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    scraper = builders.scraper() if encoding is None else Scraper(builders.scrape_limits(), encoding=encoding)
    assert scraper.fetch(url) == BODY
    assert proxy.connections == 0  # straight to the pod, never through the proxy of the environment
    ((line, headers),) = target.requests
    assert line == "GET /metrics HTTP/1.1"
    assert headers["accept-encoding"] == (encoding or "identity")  # identity by default: nothing to inflate
    assert not {"authorization", "proxy-authorization", "cookie"} & set(headers)
    assert headers["user-agent"].startswith("vllm-stall-watchdog/")


def test_gzip_body_is_decoded(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), http("200 OK", gzip.compress(BODY * 1000), "Content-Encoding: gzip\r\n")))
    assert builders.scraper().fetch(url) == BODY * 1000


def test_a_gzip_answer_to_an_identity_request_is_inflated_within_the_cap(serve: Callable[[Handler], str]) -> None:
    seen = Seen()
    url = serve(answer(seen, http("200 OK", gzip.compress(BODY * 1000), "Content-Encoding: gzip\r\n")))
    assert Scraper(builders.scrape_limits(), encoding="identity").fetch(url) == BODY * 1000
    assert seen.requests[0][1]["accept-encoding"] == "identity"
    error = reason_of(Scraper(builders.scrape_limits(max_bytes=len(BODY) * 1000 - 1), encoding="identity"), url)
    assert (error.reason, str(error)) == ("too_large", f"too large: body above {len(BODY) * 1000 - 1} bytes after gzip")


def test_an_unknown_encoding_is_refused() -> None:
    with pytest.raises(ValueError, match="identity, gzip"):
        Scraper(builders.scrape_limits(), encoding="br")


def test_chunked_body_is_read(serve: Callable[[Handler], str]) -> None:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (BODY, BODY)) + b"0\r\n\r\n"
    url = serve(answer(Seen(), b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks))
    assert builders.scraper().fetch(url) == BODY * 2


def test_redirect_is_an_error_and_not_followed(serve: Callable[[Handler], str]) -> None:
    origin, elsewhere = Seen(), Seen()
    other = serve(answer(elsewhere, http("200 OK", BODY)))
    url = serve(answer(origin, http("302 Found", headers=f"Location: {other}\r\n")))
    error = reason_of(builders.scraper(), url)
    assert error.reason == "http_status" and "302" in str(error) and "not followed" in str(error)
    assert other in str(error)
    assert (len(origin.requests), elsewhere.connections) == (1, 0)


@pytest.mark.parametrize("status", ["404 Not Found", "500 Internal Server Error", "503 Service Unavailable"])
def test_non_2xx_is_http_status(status: str, serve: Callable[[Handler], str]) -> None:
    error = reason_of(builders.scraper(), serve(answer(Seen(), http(status, b"nope"))))
    assert (error.reason, str(error)) == ("http_status", f"HTTP {status}")


@pytest.mark.parametrize(
    ("body", "encoding"),
    [(BODY, "br"), (b"not gzip at all", "gzip"), (gzip.compress(BODY * 100)[:-20], "gzip")],
    ids=["unsupported-encoding", "corrupt-gzip", "truncated-gzip"],
)
def test_bad_encoding(body: bytes, encoding: str, serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), http("200 OK", body, f"Content-Encoding: {encoding}\r\n")))
    assert reason_of(builders.scraper(), url).reason == "bad_encoding"


def test_cap_applies_to_plain_body(serve: Callable[[Handler], str]) -> None:
    limits = builders.scrape_limits(max_bytes=2000)
    error = reason_of(builders.scraper(limits), serve(answer(Seen(), http("200 OK", b"x" * 2001))))
    assert (error.reason, str(error)) == ("too_large", "too large: body above 2000 bytes")
    assert len(builders.scraper(limits).fetch(serve(answer(Seen(), http("200 OK", b"x" * 2000))))) == 2000


# The retry's connection counts: tests/adapters/test_ascrape.py (counted at the transport's connect).


def test_reset_then_success_uses_the_retry(serve: Callable[[Handler], str]) -> None:
    seen = Seen()
    url = serve(answer(seen, None, http("200 OK", BODY)))
    assert builders.scraper().fetch(url) == BODY
    assert (seen.connections, len(seen.requests)) == (2, 2)


def test_reset_twice_is_a_connection_error(serve: Callable[[Handler], str]) -> None:
    seen = Seen()
    error = reason_of(builders.scraper(), serve(answer(seen, None)))
    assert error.reason == "connection" and str(error).startswith("connection failed: ")
    assert seen.connections == 2


@pytest.mark.parametrize(
    "url", ["ftp://{host}/metrics", "http://admin:pw@{host}/metrics", "http:///metrics", "{host}"]
)
def test_unsupported_urls_are_refused_before_any_request(url: str, serve: Callable[[Handler], str]) -> None:
    seen = Seen()
    host = serve(answer(seen, http("200 OK", BODY))).split("/")[2]
    assert reason_of(builders.scraper(), url.format(host=host)).reason == "connection"
    assert seen.connections == 0


def test_error_reasons_are_checked() -> None:
    with pytest.raises(ValueError):
        ScrapeError("weird", "x")
    assert str(ScrapeError("timeout", "timeout after\n3.0 s")) == "timeout after 3.0 s"
    with pytest.raises(ValueError):
        builders.scrape_limits(deadline_s=0)


def drip(headers_first: bool) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
        if headers_first:
            conn.sendall(head)
        for byte in (b"" if headers_first else head) + b"x" * 100:
            conn.sendall(bytes([byte]))
            if stop.wait(1.0):
                return

    return handler


TLS = Path(__file__).parents[1] / "fixtures" / "tls"


def tls(handler: Handler) -> Handler:
    """``handler`` behind TLS with the fixture's self-signed certificate for 127.0.0.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS / "localhost.crt", TLS / "localhost.key")

    def wrapped(conn: socket.socket, stop: threading.Event) -> None:
        try:
            secure = context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):  # the client refused our certificate
            return
        handler(secure, stop)

    return wrapped


def test_https_is_verified_against_certifis_bundle(serve: Callable[[Handler], str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    url = serve(tls(respond(BODY))).replace("http://", "https://")
    error = reason_of(builders.scraper(), url)  # self-signed: not in certifi's bundle
    assert error.reason == "connection" and "CERTIFICATE_VERIFY_FAILED" in str(error)
    monkeypatch.setattr(connect.certifi, "where", lambda: str(TLS / "localhost.crt"))  # now it is trusted
    assert builders.scraper().fetch(url) == BODY


def timed(scraper: Scraper, url: str) -> tuple[ScrapeError, float]:
    start = time.monotonic()
    error = reason_of(scraper, url)
    return error, time.monotonic() - start


def test_server_that_never_answers_times_out_at_the_deadline(serve: Callable[[Handler], str]) -> None:
    error, elapsed = timed(builders.scraper(builders.scrape_limits(deadline_s=1.0)), serve(never_answer))
    assert (error.reason, str(error)) == ("timeout", "timeout after 1.0 s")
    assert 0.9 <= elapsed < 1.0 + 1.5


@pytest.mark.parametrize("headers_first", [True, False], ids=["drip-body", "drip-headers"])
def test_drip_one_byte_a_second_times_out_at_the_deadline(serve: Callable[[Handler], str], headers_first: bool) -> None:
    error, elapsed = timed(builders.scraper(builders.scrape_limits(deadline_s=1.5)), serve(drip(headers_first)))
    assert error.reason == "timeout"
    assert 1.4 <= elapsed < 1.5 + 1.5


def test_ten_megabyte_body_is_too_large(serve: Callable[[Handler], str]) -> None:
    error, _elapsed = timed(builders.scraper(), serve(respond(b"#" * (10 * 1024 * 1024))))
    assert error.reason == "too_large" and "8388608" in str(error)


def stalls_after(sent: int) -> Handler:
    """Promises 10 MiB, sends ``sent`` bytes of it, then nothing."""
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {10 * 1024 * 1024}\r\n\r\n".encode() + b"#" * sent)
        stop.wait(10)

    return handler


def test_the_cap_stops_the_read_as_the_bytes_arrive(serve: Callable[[Handler], str]) -> None:
    # 3 KB over a 2 KB cap, then silence: too large at once, not a timeout after everything (never) arrived
    limits = builders.scrape_limits(max_bytes=2000, deadline_s=2.0)
    error, elapsed = timed(builders.scraper(limits), serve(stalls_after(3000)))
    assert (error.reason, elapsed < 1.0) == ("too_large", True)


def test_gzip_bomb_stops_at_the_cap_with_bounded_memory(serve: Callable[[Handler], str]) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1024 * 1024)
    bomb = b"".join(packer.compress(zeros) for _ in range(64)) + packer.flush()  # 64 MiB inflated
    assert len(bomb) < 100_000
    url = serve(respond(bomb, "Content-Encoding: gzip\r\n"))
    cap = 1024 * 1024
    tracemalloc.start()
    try:
        error = reason_of(builders.scraper(builders.scrape_limits(max_bytes=cap)), url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.reason == "too_large"
    assert peak < 4 * cap  # never near the 64 MiB the bomb inflates to


def test_refused_port() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    error, elapsed = timed(builders.scraper(), f"http://127.0.0.1:{port}/metrics")
    assert (error.reason, str(error)) == ("refused", "connection refused")
    assert elapsed < 1.0


def test_connect_timeout_when_the_server_takes_no_connection() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)  # never accepted: once the backlog is full, the kernel drops further SYNs
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(server.getsockname())
            fillers.append(filler)
        time.sleep(0.1)
        limits = builders.scrape_limits(connect_timeout_s=0.3, deadline_s=5.0)
        error, elapsed = timed(builders.scraper(limits), f"http://127.0.0.1:{server.getsockname()[1]}/metrics")
    finally:
        for filler in fillers:
            filler.close()
        server.close()
    assert (error.reason, str(error)) == ("timeout", "timeout: no connection within 0.3 s")
    assert 0.25 <= elapsed < 1.5


def test_one_scraper_shared_by_threads_one_closed_connection_per_scrape(serve: Callable[[Handler], str]) -> None:
    seen = Seen()
    url = serve(answer(seen, http("200 OK", gzip.compress(BODY), "Content-Encoding: gzip\r\n")))
    scraper = builders.scraper()
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
    assert seen.connections == 12  # nothing kept between scrapes: pods close idle connections before the next cycle
    assert {headers["connection"] for _, headers in seen.requests} == {"close"}
    scraper.close()
    assert scraper.fetch(url) == BODY


def test_llama_server_router_mode_is_read_through_a_target_path_with_its_model_query(
        serve: Callable[[Handler], str]) -> None:
    """Issue 41 item 6: llama-server in router mode answers plain /metrics with 400 (unknown, never evidence) and
    serves one model's metrics at /metrics?model=NAME: a target's ``path: /metrics?model=NAME`` is sent as it is
    in the request line."""
    seen = Seen()
    url = serve(answer(seen, http("400 Bad Request", b'{"error":"model is required"}'), http("200 OK", BODY)))
    assert reason_of(builders.scraper(), url).reason == "http_status"
    assert builders.scraper().fetch(url + "?model=qwen3-8b") == BODY
    assert [line for line, _ in seen.requests] == ["GET /metrics HTTP/1.1", "GET /metrics?model=qwen3-8b HTTP/1.1"]
