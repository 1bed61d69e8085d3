"""I/O: one HTTP/1.1 answer read by ``httptools`` (llhttp) within the scrape's bounds, for
:mod:`watchdog.adapters.ascrape` (which connects, writes the request and feeds the bytes as they arrive).

:class:`Answer` is the parser's callback object: it skips 1xx answers, refuses a status below 100, a non-2xx final
answer (``http_status``, a redirect named, never followed) and a content coding other than identity/gzip
(``bad_encoding``), caps the body on the wire and after inflating (``too_large``), and stops the parser at the end
of the final answer (:class:`_Done`): nothing after it is read. :meth:`Answer.account` bounds what the parser
keeps in memory between callbacks: the response head (:data:`MAX_HEAD`), the framing that brought no body byte
(chunk sizes, extensions, trailers) and the bytes on the wire. :func:`feed` gives one piece to the parser and
turns its callback errors back into the :class:`~watchdog.adapters.scrape_errors.ScrapeError` they were.
"""

from __future__ import annotations

import httptools

from watchdog.adapters.inflate import Inflater
from watchdog.adapters.scrape import check_head
from watchdog.adapters.scrape_errors import ScrapeError

__all__ = ["MAX_HEAD", "Answer", "feed"]

MAX_HEAD = 64 * 1024
"""Bytes of a response head (status line and headers) at most: above, ``connection`` (http.client allowed 100
header lines of 64 KiB each)."""


class Answer:
    """What httptools' parser reports of one response (its callbacks), within the cap. A 1xx answer is skipped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.received = self.began = self.done = self.framed = False
        self.head: Inflater | bool | None = None  # None until the final answer's head; then its inflater or False
        self.on_wire = self.fed = self.head_fed = self.idle_fed = self.body_seen = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.parts: list[bytes] = []
        self.parser: httptools.HttpResponseParser | None = None

    def on_message_begin(self) -> None:
        self.began = True
        self.reason, self.headers = b"", []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason  # in pieces when it arrived in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        status = self.parser.get_status_code()
        if status < 100:
            raise ScrapeError("connection", f"connection failed: invalid status code {status}")
        if status < 200:
            return  # informational (1xx), never the answer; 101 without our asking is an error of the parser's
        inflater = check_head(status, self.reason.decode("latin-1"), _header(self.headers, b"location"),
                              _header(self.headers, b"content-encoding"), self.cap)
        self.head = False if inflater is None else inflater
        coding = _header(self.headers, b"transfer-encoding")
        self.framed = _header(self.headers, b"content-length") is not None or (
            coding is not None and coding.split(",")[-1].strip().lower() == "chunked")

    def on_body(self, data: bytes) -> None:
        self.on_wire += len(data)
        if self.on_wire > self.cap:
            raise ScrapeError("too_large", f"too large: body above {self.cap} bytes")
        self.parts.append(data if not isinstance(self.head, Inflater) else self.head.feed(data))

    def on_message_complete(self) -> None:
        if self.head is not None:
            self.done = True
            raise _Done  # stops llhttp here: whatever follows the answer (another answer, garbage) is never read

    def account(self, size: int) -> None:
        """Count ``size`` bytes just fed: the head's bound until the final head is read (a whole piece when an
        answer began in it), then the bytes on the wire and the framing that brought no body byte (chunk sizes,
        extensions, trailers: llhttp keeps a trailer line in memory until its end)."""
        self.fed += size
        if self.head is None:
            self.head_fed = size if self.began else self.head_fed + size
            self.began = False
            if self.head_fed > MAX_HEAD:
                raise ValueError(f"response head above {MAX_HEAD} bytes")
            return
        if self.done:
            return
        self.idle_fed = 0 if self.on_wire > self.body_seen else self.idle_fed + size
        self.body_seen = self.on_wire
        if self.idle_fed > MAX_HEAD:
            raise ValueError(f"more than {MAX_HEAD} bytes of framing (chunk sizes, extensions, trailers) "
                             "without a body byte")
        if self.fed > 2 * self.cap + MAX_HEAD:
            raise ScrapeError("too_large", f"too large: more than {2 * self.cap} bytes on the wire for a body of "
                                           f"at most {self.cap}")

    def body(self) -> bytes:
        if isinstance(self.head, Inflater):
            self.head.finish()
        return b"".join(self.parts)  # within the cap: counted on the wire, and by the Inflater after inflating


class _Done(Exception):
    """Raised by the parser's callback at the end of the final answer: llhttp stops there."""


def feed(parser: httptools.HttpResponseParser, piece: memoryview) -> None:
    """Feed one piece; the end of the answer ends it quietly, a callback's ScrapeError is raised as itself."""
    try:
        parser.feed_data(piece)
    except httptools.HttpParserCallbackError as exc:
        if isinstance(exc.__context__, _Done):
            return
        if isinstance(exc.__context__, ScrapeError):
            raise exc.__context__ from None
        raise
    except httptools.HttpParserUpgrade:
        raise ValueError("the pod switched protocols (101, Upgrade) unasked") from None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    """Every value of header ``name`` (lower case) joined by ", " (as http.client does), or None."""
    values = [value.decode("latin-1") for key, value in headers if key == name]
    return ", ".join(values) if values else None
