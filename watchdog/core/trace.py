"""Recorded traces for the ``replay`` verb: CSV rows -> detector samples -> verdicts. Pure: the caller opens
the stream.

The CSV format (one row per scrape of one engine series, in time order)::

    t,running,generation_tokens,prompt_tokens[,waiting][,heartbeat]

``t`` is seconds (any monotonic origin); the other cells are the gauge/counter values, an empty cell meaning
*unknown* (failed scrape or missing metric). Bad input raises :class:`TraceError` naming file, line and column.
"""

from __future__ import annotations

import codecs
import csv
import math
import re
from dataclasses import dataclass
from typing import Any, TextIO

from watchdog.core.detector import DetectorState, Sample

REQUIRED_COLUMNS = ("t", "running", "generation_tokens", "prompt_tokens")
OPTIONAL_COLUMNS = ("waiting", "heartbeat")


class TraceError(Exception):
    """A trace that cannot be read; ``str()`` is one line naming file, line and column."""


@dataclass(frozen=True)
class Trace:
    """Samples read from a CSV trace, plus the columns that were ignored."""

    samples: list[Sample]
    ignored_columns: list[str]
    backwards_lines: list[int]  # lines whose t is below the previous row's (a clock reset: re-baselined)


def _cell(raw: str, where: str, column: str) -> float | None:
    text = raw.strip()
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}, column {column!r}: {text!r} is not a number") from None
    return value


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what the csv module (and open(newline="")) counts as one line


def decode_trace(data: bytes, name: str) -> str:
    """The UTF-8 text of a trace file's bytes (a leading BOM dropped). A byte that is not UTF-8 raises
    :class:`TraceError` naming the line and the column (characters, from 1) where it is."""
    body = data[len(codecs.BOM_UTF8):] if data.startswith(codecs.BOM_UTF8) else data
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = body[: exc.start].decode("utf-8")  # strict decoding stops at the first bad byte: all valid
        breaks = list(_LINE_BREAK.finditer(before))
        line = len(breaks) + 1
        column = len(before) - (breaks[-1].end() if breaks else 0) + 1
        raise TraceError(f"{name}:{line}, column {column}: byte 0x{body[exc.start]:02x} is not UTF-8 "
                         f"({exc.reason}); save the trace as UTF-8 text") from None


def read_trace(stream: TextIO, name: str) -> Trace:
    """Parse a CSV trace from ``stream`` (``name`` is used in errors). Raises :class:`TraceError`."""
    reader = csv.reader(stream)
    try:
        header = next(reader, None)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"{name}:1: unreadable CSV: {exc}") from None
    if header is None:
        raise TraceError(f"{name}: empty file, expected a header row with {', '.join(REQUIRED_COLUMNS)}")
    header = [h.strip().lstrip("\ufeff") for h in header]  # a UTF-8 BOM (Excel) is not part of the name
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:
        raise TraceError(f"{name}:1: column(s) {', '.join(twice)} appear more than once")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{name}:1: missing column(s) {', '.join(missing)} (header is {','.join(header)})")
    index = {c: header.index(c) for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in header}
    ignored = [h for h in header if h not in index]
    samples: list[Sample] = []
    backwards: list[int] = []
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            where = f"{name}:{line}"
            if len(row) != len(header):
                raise TraceError(f"{where}: {len(row)} cells, header has {len(header)}")
            values = {c: _cell(row[i], where, c) for c, i in index.items()}
            t = values["t"]
            if t is None or not math.isfinite(t):
                raise TraceError(f"{where}, column 't': a finite time in seconds is required")
            if samples and t < samples[-1].t:
                backwards.append(line)
            samples.append(
                Sample(
                    t=t,
                    running=values["running"],
                    generation_tokens=values["generation_tokens"],
                    prompt_tokens=values["prompt_tokens"],
                    waiting=values.get("waiting"),
                    heartbeat=values.get("heartbeat"),
                )
            )
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"{name}:{reader.line_num}: unreadable CSV: {exc}") from None
    return Trace(samples, ignored, backwards)


def replay(trace: Trace, window_s: float, min_samples: int, count_waiting: bool) -> list[dict[str, Any]]:
    """The detector's verdict after each sample, as JSON-ready dicts."""
    state = DetectorState(window_s, min_samples=min_samples, count_waiting=count_waiting)
    out = []
    for sample in trace.samples:
        v = state.observe(sample)
        out.append(
            {"t": sample.t, "state": v.state, "stalled": v.stalled, "stalled_for_s": v.stalled_for_s,
             "reason": v.reason}
        )
    return out
