"""httpanswer: one answer fed to llhttp piece by piece, without a socket (the socket-level contract is in
test_scrape.py / test_ascrape.py)."""

from __future__ import annotations

import gzip

import httptools
import pytest

from watchdog.adapters.httpanswer import MAX_HEAD, Answer, feed
from watchdog.adapters.scrape_errors import ScrapeError


def read(data: bytes, cap: int = 1 << 20, piece: int = 7) -> Answer:
    """Feed ``data`` in ``piece``-byte pieces (accounted like the scraper does) until the answer is done."""
    answer = Answer(cap)
    parser = answer.parser = httptools.HttpResponseParser(answer)
    view = memoryview(data)
    while view and not answer.done:
        chunk, view = view[:piece], view[piece:]
        feed(parser, chunk)
        answer.account(len(chunk))
    answer.parser = None
    return answer


def test_pieces_of_any_size_give_the_body_and_stop_at_its_end() -> None:
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad"
    for piece in (1, 7, len(data)):
        answer = read(data, piece=piece)
        assert answer.done and answer.body() == b"hello"


def test_gzip_is_inflated_within_the_cap() -> None:
    body = gzip.compress(b"x" * 5_000)
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert read(head + body, piece=4096).body() == b"x" * 5_000
    with pytest.raises(ScrapeError) as info:
        read(head + body, cap=1_000, piece=4096).body()
    assert info.value.reason == "too_large"


@pytest.mark.parametrize(("data", "reason"), [
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "http_status"),
    (b"HTTP/1.1 301 Moved\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n", "http_status"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 0\r\n\r\n", "bad_encoding"),
    (b"HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n", "connection"),
])
def test_what_the_head_refuses(data: bytes, reason: str) -> None:
    with pytest.raises(ScrapeError) as info:
        read(data)
    assert info.value.reason == reason


def test_the_head_bound_counts_every_byte_until_the_final_head() -> None:
    with pytest.raises(ValueError, match="response head above"):
        read(b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEAD, piece=4096)
    informational = b"HTTP/1.1 100 Continue\r\n\r\n" * 3_000  # 75 KB of 1xx answers: each starts the count again
    assert read(informational + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", piece=4096).body() == b"ok"
