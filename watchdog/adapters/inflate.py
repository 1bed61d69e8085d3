"""Incremental gzip inflation with a hard cap: a gzip bomb stops at the cap without ever being held in
memory (``zlib`` with ``max_length``; concatenated members are valid gzip)."""

from __future__ import annotations

import zlib

from watchdog.adapters.scrape_errors import ScrapeError


class Inflater:
    """Incremental gzip decoding that never produces more than ``cap`` + 1 bytes in total."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._out = 0
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, chunk: bytes) -> bytes:
        pieces: list[bytes] = []
        data = chunk
        try:
            while data:
                if self._d.eof:  # a further gzip member (concatenated gzip is valid)
                    data = self._d.unused_data + data if self._d.unused_data else data
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                piece = self._d.decompress(data, self._cap - self._out + 1)
                self._out += len(piece)
                if self._out > self._cap:
                    raise ScrapeError("too_large", f"too large: body above {self._cap} bytes after gzip")
                pieces.append(piece)
                data = self._d.unconsumed_tail or (self._d.unused_data if self._d.eof else b"")
                if self._d.eof and data:
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        except zlib.error as exc:
            raise ScrapeError("bad_encoding", f"bad encoding: corrupt gzip body ({exc})") from None
        return b"".join(pieces)

    def finish(self) -> None:
        if not self._d.eof:
            raise ScrapeError("bad_encoding", "bad encoding: truncated gzip body")
