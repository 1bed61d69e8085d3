"""``replay --expositions DIR``: what the watchdog would have done over ``/metrics`` bodies recorded in an incident.

DIR holds one file per scrape named ``<seconds>.prom`` (integer or decimal seconds on one clock, e.g. from
``while sleep 15; do curl -s http://POD:8000/metrics > $(date +%s).prom; done``), read in numeric order. Each
body goes through exactly what ``run`` does with a scrape: the same size bound as a scrape
(:class:`~watchdog.adapters.scrape_errors.ScrapeLimits`, larger is unknown), the same bounded parser and the
same per-pod detector fold (:meth:`watchdog.controller.state.PodRecord.observe`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from watchdog.config.settings import BY_NAME
from watchdog.controller.state import PodRecord
from watchdog.core.detector import DetectorState
from watchdog.core.parsing import ParseResult, parse_exposition
from watchdog.core.profiles import Profile
from watchdog.core.trace import TraceError

_NAME = re.compile(r"([0-9]+(?:\.[0-9]+)?)\.prom")


@dataclass(frozen=True)
class Scrape:
    """One recorded body: its time ``t`` (seconds from the file name) and path."""

    t: float
    path: str


def list_expositions(directory: str) -> list[Scrape]:
    """The ``<seconds>.prom`` files of ``directory`` in numeric order; raises :class:`TraceError` for a file
    with another name, two files with the same time, an entry that is not a regular file, or an
    unreadable/empty directory."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise TraceError(f"{directory}: cannot list the directory: {exc.strerror or exc}") from None
    scrapes: dict[float, Scrape] = {}
    for name in names:
        path = os.path.join(directory, name)
        match = _NAME.fullmatch(name)
        if match is None:
            raise TraceError(f"{path}: expected a file named <seconds>.prom (e.g. 1733030400.prom or 15.5.prom), one "
                             "per scrape")
        t = float(match.group(1))
        if not math.isfinite(t):
            raise TraceError(f"{path}: the time in the name is not a finite number")
        if t in scrapes:
            raise TraceError(f"{path}: same time as {scrapes[t].path}")
        if not os.path.isfile(path):  # checked before any verdict is printed
            raise TraceError(f"{path}: not a regular file (a directory or a dangling link)")
        scrapes[t] = Scrape(t, path)
    if not scrapes:
        raise TraceError(f"{directory}: no <seconds>.prom files")
    return [scrapes[t] for t in sorted(scrapes)]


MAX_BODY_BYTES: int = BY_NAME["max_body_bytes"].default  # what run accepts by default


def read_body(scrape: Scrape) -> bytes | None:
    """The body of one recorded scrape, or None when it is larger than a scrape may be (unknown, as in ``run``).
    Raises :class:`TraceError` when the file cannot be read."""
    try:
        with open(scrape.path, "rb") as stream:
            data = stream.read(MAX_BODY_BYTES + 1)
    except OSError as exc:
        raise TraceError(f"{scrape.path}: cannot read: {exc.strerror or exc}") from None
    return None if len(data) > MAX_BODY_BYTES else data


def replay_expositions(scrapes: list[Scrape], profile: Profile, window_s: float, min_samples: int,
                       count_waiting: bool, completion_window_s: float | None,
                       note: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """One JSON-ready verdict per recorded scrape and engine series, in time order; ``note`` is told what a
    user should know (skipped lines, bodies that are unknown as a whole). Raises :class:`TraceError` for a
    file that cannot be read."""
    pod = PodRecord(restart_count=0, first_seen=scrapes[0].t)

    def new_detector() -> DetectorState:
        return DetectorState(window_s, min_samples=min_samples, count_waiting=count_waiting,
                             signals=profile.progress, completion_window_s=completion_window_s)

    for scrape in scrapes:
        body = read_body(scrape)
        parsed: ParseResult | None = None
        if body is None:
            note(f"{scrape.path}: larger than a scrape may be ({MAX_BODY_BYTES} bytes): unknown")
        else:
            parsed = parse_exposition(body, profile)
            if parsed.overrun:
                note(f"{scrape.path}: {parsed.overrun}: unknown, as in run")
                parsed = None
            elif parsed.skipped_lines:
                note(f"{scrape.path}: {parsed.skipped_lines} malformed line(s) of the profile's metrics skipped")
            if parsed is not None and parsed.dropped_series:
                note(f"{scrape.path}: {parsed.dropped_series} engine series beyond the cap of {len(parsed.series)} "
                     "dropped, as in run")
        _, observations = pod.observe(scrape.t, parsed, window_s, new_detector)
        if not observations:
            note(f"{scrape.path}: no engine series of the {profile.name} profile")
        for seen in observations:
            verdict = seen.verdict
            labels = dict(seen.engine.last.labels) if seen.engine.last is not None else {}
            yield {"t": scrape.t, "series": labels, "state": verdict.state, "stalled": verdict.stalled,
                   "stalled_for_s": verdict.stalled_for_s, "reason": verdict.reason}
