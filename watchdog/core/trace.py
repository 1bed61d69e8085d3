"""Recorded traces for the ``replay`` verb: CSV rows -> detector samples -> verdicts. Pure: the caller opens
the stream.

The CSV format (one row per scrape of one engine series, in time order)::

    t,running[,waiting][,paused],<progress column>[,<progress column>...]

``t`` is seconds (any monotonic origin); the other cells are the gauge/counter values, an empty cell meaning
*unknown* (failed scrape or missing metric). Progress columns (at least one): the counters
``generation_tokens``, ``prompt_tokens``, ``heartbeat`` and any ``progress_<name>`` column, and the gauge
``kv_cache_usage`` (any change is progress). Bad input raises :class:`TraceError` naming file, line and column.
"""

from __future__ import annotations

import codecs
import csv
import math
import re
from dataclasses import dataclass
from typing import Any, TextIO

from watchdog.core.detector import DetectorState, Sample
from watchdog.core.profiles import Selector

REQUIRED_COLUMNS = ("t", "running")
OPTIONAL_COLUMNS = ("waiting", "paused")
COUNTER_COLUMNS = ("generation_tokens", "prompt_tokens", "heartbeat")
GAUGE_COLUMNS = ("kv_cache_usage",)
PROGRESS_PREFIX = "progress_"


class TraceError(Exception):
    """A trace that cannot be read; ``str()`` is one line naming file, line and column."""


@dataclass(frozen=True)
class Trace:
    """Samples read from a CSV trace, plus the columns that were ignored."""

    samples: list[Sample]
    signals: tuple[Selector, ...]  # the progress columns, in Sample.progress order
    ignored_columns: list[str]
    backwards_lines: list[int]  # lines whose t is below the previous row's (a clock reset: re-baselined)


def _cell(raw: str, where: str, column: str) -> float | None:
    text = raw.strip()
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise TraceError(f"{where}, column {column!r}: {text!r} is not a number") from None


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
    progress = [h for h in header if h in COUNTER_COLUMNS + GAUGE_COLUMNS or h.startswith(PROGRESS_PREFIX)]
    if not progress:
        raise TraceError(f"{name}:1: no progress column (one of {', '.join(COUNTER_COLUMNS + GAUGE_COLUMNS)} or "
                         f"{PROGRESS_PREFIX}<name>; header is {','.join(header)})")
    index = {c: header.index(c) for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in header}
    index.update((h, header.index(h)) for h in progress)
    samples: list[Sample] = []
    backwards: list[int] = []  # lines whose time went back
    try:
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue  # a blank row
            sample = _sample(row, f"{name}:{reader.line_num}", len(header), index, progress)
            if samples and sample.t < samples[-1].t:
                backwards.append(reader.line_num)
            samples.append(sample)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"{name}:{reader.line_num}: unreadable CSV: {exc}") from None
    signals = tuple(Selector(h, kind="gauge" if h in GAUGE_COLUMNS else "counter") for h in progress)
    return Trace(samples, signals, [h for h in header if h not in index], backwards)


def _sample(row: list[str], where: str, width: int, index: dict[str, int], progress: list[str]) -> Sample:
    """One row's sample: as many cells as the header, numbers or empty, and a finite time."""
    if len(row) != width:
        raise TraceError(f"{where}: {len(row)} cells, header has {width}")
    values = {c: _cell(row[i], where, c) for c, i in index.items()}
    t = values["t"]
    if t is None or not math.isfinite(t):
        raise TraceError(f"{where}, column 't': a finite time in seconds is required")
    return Sample(t=t, running=values["running"], progress=tuple(values[h] for h in progress),
                  waiting=values.get("waiting"), paused=values.get("paused"))


def replay(trace: Trace, window_s: float, min_samples: int, count_waiting: bool,
           completion_window_s: float | None = None) -> list[dict[str, Any]]:
    """The detector's verdict after each sample, as JSON-ready dicts."""
    state = DetectorState(window_s, min_samples=min_samples, count_waiting=count_waiting, signals=trace.signals,
                          completion_window_s=completion_window_s)
    out = []
    for sample in trace.samples:
        v = state.observe(sample)
        out.append(
            {"t": sample.t, "state": v.state, "stalled": v.stalled, "stalled_for_s": v.stalled_for_s,
             "reason": v.reason}
        )
    return out
