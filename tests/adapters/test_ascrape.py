"""AsyncScraper beyond the contract and bounds of tests/adapters/test_scrape.py (which runs on it): the retry's
connection counts, and what only the event loop has: many scrapes at once on the one loop thread, the loop stopped
by close() and started again, the response head bound."""
# ruff: noqa: F811

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import builders
import pytest
from loopback_kit import (  # noqa: F401  (serve: the loopback server fixture, a parameter below)
    BODY,
    Handler,
    Seen,
    answer,
    http,
    never_answer,
    read_request,
    reason_of,
    serve,
)

from watchdog.adapters import ascrape, httpanswer
from watchdog.adapters.ascrape import MAX_HEAD
from watchdog.adapters.scrape_errors import ScrapeError


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the connection attempts ."""
    attempts: list[str] = []
    real = ascrape._open

    async def counting(target: Any, tls: Any) -> Any:
        attempts.append(target.host)
        return await real(target, tls)

    monkeypatch.setattr(ascrape, "_open", counting)
    return attempts


def _free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port: int = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return port


# The two contract tests that count connections through urllib3's HTTPConnection: the same assertions, counted
# at the async scraper's connect.
def test_refused_is_retried_once_then_reported(connects: list[str]) -> None:
    started = time.monotonic()
    error = reason_of(builders.scraper(), f"http://127.0.0.1:{_free_port()}/metrics")
    elapsed = time.monotonic() - started
    assert (error.reason, str(error)) == ("refused", "connection refused")
    assert len(connects) == 2
    assert 0.05 <= elapsed < 1.0  # the retry comes after the 50 ms pause


def test_refused_is_not_retried_when_the_deadline_leaves_no_room(connects: list[str]) -> None:
    scraper = builders.scraper(builders.scrape_limits(deadline_s=0.09, connect_timeout_s=0.09))
    error = reason_of(scraper, f"http://127.0.0.1:{_free_port()}/m")
    assert error.reason == "refused" and len(connects) == 1  # < 2 x 50 ms left: no retry


# ---------------------------------------------------------------- the loop


def test_many_scrapes_at_once_on_the_one_loop_thread(serve: Callable[[Handler], str]) -> None:
    seen = Seen()
    url = serve(answer(seen, http("200 OK", BODY)))
    scraper = builders.scraper()
    threads_before = set(threading.enumerate())

    async def one() -> tuple[bytes, str]:
        return await scraper.fetch_async(url), threading.current_thread().name

    futures = [scraper.run(one()) for _ in range(12)]  # within the test server's listen backlog (16)
    results = [f.result(timeout=10) for f in futures]
    assert results == [(BODY, "scrape-loop")] * 12
    started = {t.name for t in set(threading.enumerate()) - threads_before  # but the test server's own threads
               if not t.name.endswith(("(_run)", "(accept_loop)"))}
    assert started <= {"scrape-loop"}, started  # the loop's thread, no thread per scrape
    assert seen.connections == 12 and {h["connection"] for _, h in seen.requests} == {"close"}
    scraper.close()


def test_close_stops_the_loop_and_a_later_scrape_starts_it_again(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), http("200 OK", BODY)))
    scraper = builders.scraper()
    assert scraper.fetch(url) == BODY
    (loop_thread,) = [t for t in threading.enumerate() if t.name == "scrape-loop" and t is scraper._thread]
    scraper.close()
    assert not loop_thread.is_alive()
    assert scraper.fetch(url) == BODY
    scraper.close()
    scraper.close()  # twice: nothing left to stop


def test_close_cancels_a_scrape_still_waiting(serve: Callable[[Handler], str]) -> None:
    url = serve(never_answer)
    scraper = builders.scraper(builders.scrape_limits(deadline_s=30))
    future = scraper.run(scraper.fetch_async(url))
    time.sleep(0.2)
    started = time.monotonic()
    scraper.close()
    assert future.cancelled() and time.monotonic() - started < 2


def test_fetch_from_the_loop_itself_is_refused() -> None:
    scraper = builders.scraper()

    async def inside() -> None:
        scraper.fetch("http://127.0.0.1:1/metrics")

    with pytest.raises(RuntimeError, match="fetch_async"):
        scraper.run(inside()).result(timeout=5)
    scraper.close()


def test_a_response_head_above_the_bound_is_a_connection_error(serve: Callable[[Handler], str]) -> None:
    def huge_head(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"y" * (2 * MAX_HEAD) + b"\r\n\r\n" + BODY)

    error = reason_of(builders.scraper(), serve(huge_head))
    assert error.reason == "connection" and str(error).startswith("connection failed: ")
    headers = "".join(f"X-Filler-{i}: {'y' * 100}\r\n" for i in range(MAX_HEAD // 200))  # half the bound: read
    assert builders.scraper().fetch(serve(answer(Seen(), http("200 OK", BODY, headers)))) == BODY


def test_close_delimited_body_is_read(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY * 3))
    assert builders.scraper().fetch(url) == BODY * 3


def test_bytes_after_the_end_of_the_answer_are_never_read(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), http("200 OK", BODY) + b"\x00 not HTTP at all \r\n\r\n"))
    assert builders.scraper().fetch(url) == BODY


def test_a_second_answer_in_the_same_write_is_never_read(serve: Callable[[Handler], str]) -> None:
    """Found by a fresh-eyes helper: llhttp went on parsing after the answer, appending a pipelined answer's body
    (each with its own gzip cap: 55 MB from a 1 MiB cap)."""
    pipelined = http("200 OK", BODY) + http("200 OK", b"INJECTED") + http("500 Oops", b"")
    assert builders.scraper().fetch(serve(answer(Seen(), pipelined))) == BODY


@pytest.mark.parametrize(("head", "said"), [
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",  # unasked
     "switched protocols"),
    (b"HTTP/1.1 000 Zero\r\nContent-Length: 9\r\n\r\nINJECTED\n", "invalid status code 0"),  # not a 1xx
], ids=["101-upgrade", "status-000"])
def test_a_protocol_switch_or_a_status_below_100_is_a_connection_error(serve: Callable[[Handler], str],
                                                                        head: bytes, said: str) -> None:
    error = reason_of(builders.scraper(), serve(answer(Seen(), head + http("200 OK", BODY))))
    assert error.reason == "connection" and str(error).startswith("connection failed: ") and said in str(error)


def test_endless_trailers_end_at_the_framing_bound_not_the_deadline(serve: Callable[[Handler], str]) -> None:
    """A chunked body whose trailer never ends: llhttp keeps the line in memory (and grows it quadratically)."""
    url = serve(flood(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nX-T: ", b"y"))
    started = time.monotonic()
    error = reason_of(builders.scraper(builders.scrape_limits(deadline_s=5.0)), url)
    assert error.reason == "connection" and "without a body byte" in str(error)
    assert time.monotonic() - started < 2.5  # the bound, long before the deadline


def test_the_wire_is_capped_at_twice_the_body_cap(serve: Callable[[Handler], str]) -> None:
    body = b"x" * 100_000
    tiny = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * len(body) + b"0\r\n\r\n"
    whole = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    limits = builders.scrape_limits(max_bytes=2 * len(body))
    assert builders.scraper(limits).fetch(serve(answer(Seen(), whole))) == body
    error = reason_of(builders.scraper(limits), serve(answer(Seen(), tiny)))  # 600 KB of wire for 100 KB of body
    assert error.reason == "too_large" and "on the wire" in str(error)


@pytest.mark.parametrize("path", ["/metrics x", "/m\x7fetrics", "/m\u00e9trics"])
def test_a_path_a_request_line_cannot_carry_is_refused_before_sending(serve: Callable[[Handler], str],
                                                                     path: str) -> None:
    seen = Seen()
    url = serve(answer(seen, http("200 OK", BODY)))
    error = reason_of(builders.scraper(), url.replace("/metrics", path))
    assert error.reason == "connection" and "cannot be sent in a request line" in str(error)
    assert seen.requests == [] and seen.connections == 0  # refused before connecting


def test_an_informational_answer_before_the_answer_is_skipped(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
                       + http("200 OK", BODY)))
    assert builders.scraper().fetch(url) == BODY


def test_a_body_cut_short_is_a_connection_error(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + BODY))
    error = reason_of(builders.scraper(), url)
    assert error.reason == "connection"


def test_the_deadline_covers_the_retry(serve: Callable[[Handler], str], connects: list[str]) -> None:
    seen = Seen()

    def reset_then_hang(conn: socket.socket, stop: threading.Event) -> None:
        n = seen.connections
        seen.connections += 1
        if n == 0:
            answer(Seen(), None)(conn, stop)
        else:
            stop.wait(10)

    url = serve(reset_then_hang)  # reset, then the retry's answer never comes: the one deadline covers both
    started = time.monotonic()
    error = reason_of(builders.scraper(builders.scrape_limits(deadline_s=0.8)), url)
    elapsed = time.monotonic() - started
    assert (error.reason, str(error)) == ("timeout", "timeout after 0.8 s")
    assert len(connects) == 2 and 0.7 <= elapsed < 1.5


def test_a_shorter_deadline_per_scrape_and_never_a_longer_one(serve: Callable[[Handler], str]) -> None:
    url = serve(lambda conn, stop: stop.wait(10))  # accepts, never answers
    scraper = builders.scraper(builders.scrape_limits(deadline_s=0.6))
    for asked, expected in ((0.2, 0.2), (30.0, 0.6)):
        started = time.monotonic()
        with pytest.raises(ScrapeError) as caught:
            scraper.run(scraper.fetch_async(url, deadline_s=asked)).result(5)
        elapsed = time.monotonic() - started
        assert (caught.value.reason, str(caught.value)) == ("timeout", f"timeout after {expected} s")
        assert expected - 0.05 <= elapsed < expected + 0.4
    scraper.close()


def test_the_loop_uses_the_monotonic_clock() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert abs(loop.time() - time.monotonic()) < 0.5
    finally:
        loop.close()


def test_closed_before_any_answer_is_retried_as_a_reset(serve: Callable[[Handler], str], connects: list[str]) -> None:
    seen = Seen()

    def close_then_answer(conn: socket.socket, stop: threading.Event) -> None:
        n = seen.connections
        seen.connections += 1
        read_request(conn)
        if n > 0:
            conn.sendall(http("200 OK", BODY))
        # the first connection: closed (FIN, no RST) without a byte of answer, as http.client's RemoteDisconnected

    assert builders.scraper().fetch(serve(close_then_answer)) == BODY
    assert len(connects) == 2


def flood(head: bytes, piece: bytes) -> Handler:
    """A pod that answers ``head`` and then ``piece`` (a 1-byte chunk, an endless 1xx) as fast as it can."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(head)
        block = piece * 4096
        try:
            while not stop.is_set():
                conn.sendall(block)
        except OSError:
            return

    return handler


@pytest.mark.parametrize("head, piece", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\na\r\n"),  # a valid body of 1-byte chunks
    (b"", b"HTTP/1.1 100 Continue\r\n\r\n"),  # informational answers, never the answer
], ids=["tiny-chunks", "endless-1xx"])
def test_a_flood_of_tiny_events_holds_neither_the_loop_nor_its_deadline(
        serve: Callable[[Handler], str], head: bytes, piece: bytes) -> None:
    hogs = [serve(flood(head, piece)) for _ in range(3)]
    healthy = serve(answer(Seen(), http("200 OK", BODY)))
    # a cap the hogs cannot reach within the deadline (a fast machine sent the default cap's 16 MB of wire in
    # 1.4 s), so that the deadline is what ends them
    scraper = builders.scraper(builders.scrape_limits(deadline_s=2.0, max_bytes=512 << 20))

    async def timed(url: str) -> tuple[str, float]:
        started = time.monotonic()
        try:
            await scraper.fetch_async(url)
            return "ok", time.monotonic() - started
        except ascrape.ScrapeError as exc:
            return exc.reason, time.monotonic() - started

    hogging = [scraper.run(timed(url)) for url in hogs]
    time.sleep(0.3)  # the hogs are flooding the loop now
    fast = [scraper.run(timed(healthy)) for _ in range(10)]
    results = [f.result(timeout=10) for f in fast]
    assert all(outcome == "ok" and took < 1.0 for outcome, took in results), results  # not held back
    for outcome, took in (f.result(timeout=10) for f in hogging):
        assert outcome == "timeout" and took < 2.5, (outcome, took)  # its own deadline holds
    scraper.close()


def test_every_content_encoding_header_counts(serve: Callable[[Handler], str]) -> None:
    url = serve(answer(Seen(), http("200 OK", BODY, "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n")))
    error = reason_of(builders.scraper(), url)
    assert (error.reason, str(error)) == ("bad_encoding",
                                          "bad encoding: unsupported Content-Encoding 'identity, gzip'")


def test_close_while_a_fetch_waits_is_a_scrape_error(serve: Callable[[Handler], str]) -> None:
    url = serve(never_answer)
    scraper = builders.scraper(builders.scrape_limits(deadline_s=30))
    caught: list[BaseException] = []

    def fetch() -> None:
        try:
            scraper.fetch(url)
        except BaseException as exc:  # what escapes is the point
            caught.append(exc)

    thread = threading.Thread(target=fetch)
    thread.start()
    time.sleep(0.3)
    scraper.close()
    thread.join(5)
    assert len(caught) == 1 and isinstance(caught[0], ascrape.ScrapeError), caught
    assert caught[0].reason == "connection" and "closed" in str(caught[0])


def test_a_scrape_leaves_no_reference_cycle_holding_its_answer(serve: Callable[[Handler], str]) -> None:
    """The cycle pauses the collector while it scrapes the fleet: an answer kept alive by a reference cycle (the
    parser holds it, it held the parser) stayed in memory with its body until the end (peak RSS 92 -> 269 MiB at
    2,000 pods)."""
    url = serve(answer(Seen(), http("200 OK", BODY)))
    scraper = builders.scraper()
    scraper.fetch(url)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(5):
            assert scraper.fetch(url) == BODY
        gc.collect()
        assert not [o for o in gc.garbage if isinstance(o, httpanswer.Answer)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        scraper.close()
