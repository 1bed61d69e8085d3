"""PURE: one ``/metrics`` body (Prometheus text format 0.0.4) -> the engine series of one profile.

:func:`parse_exposition` returns a :class:`ParseResult`: one :class:`EngineSnapshot` per engine series with
the signals of the :class:`~watchdog.core.profiles.Profile` (requests running/waiting, each progress signal,
paused), as floats exactly as exposed, or ``None`` when the body has no sample of that series for that engine
("unknown", never 0). A sample feeds a signal when its name is the selector's and its labels satisfy the
selector's matchers (``mode="decode"``, ``reason!="deferred"``).

How (and why it is fast): a bytes-level pre-filter (one ``re`` search anchored on ``\\n``, which runs at
``bytes.split`` speed) keeps only lines that start with one of the profile's sample names followed by ``{``,
a space or a tab; every other line -- HELP/TYPE comments, the other ~100 families, their histogram buckets
-- is never decoded or parsed. Names match exactly, never as prefixes: ``vllm:generation_tokens_created``,
``vllm:num_requests_waiting_by_reason`` and ``vllm:iteration_tokens_total_sum``/``_bucket`` are other series.
Each kept line is parsed on its own: canonical lines (``name{a="b",...} value [timestamp]`` with no
backslash escapes) by a strict regular expression, anything else by ``prometheus_client``'s parser
(``text_string_to_metric_families`` on that one line). A line that neither accepts is skipped and counted in
``skipped_lines``; the rest of the body is still used. The tests check that the result equals a full
``prometheus_client`` parse of each fixture. Lines of other families are never parsed, so garbage there is
neither noticed nor counted. ``*_created`` samples are ignored like any other line. The first line
``# EOF`` ends the body (OpenMetrics: nothing follows it); whatever comes after it is never read. A UTF-8 byte
order mark before the first line is skipped. A sample line must start at column 0 (or after spaces/tabs);
lines separated by ``\\r\\n`` are fine.

Bounded work (issue 11 item 8: every opted-in pod is an untrusted input). The work per body is bounded by
counting, never by time (the core reads no clock), with :class:`ParseLimits` (defaults :data:`LIMITS`): at
most ``lines`` lines in the body (500,000; counted only when the body has more bytes than that), at most
``candidate_lines`` lines that pass the name pre-filter (2,048) and ``candidate_bytes`` of them (512 KiB), of
which at most ``fallback_lines`` (256) and ``fallback_bytes`` (32 KiB) may go to ``prometheus_client``, the
slow path (tens of microseconds a line, about 0.6 us a byte). A real vLLM exposition is far inside: 8
data-parallel engines are about 390 KB, 3,400 lines and 40 candidate lines, none of them slow. A body beyond
any bound is an *overrun*: the result has ``overrun`` set to the reason, no series and no found families --
unknown, never a partial result that could pass for evidence. The costliest body within the bounds takes
tens of milliseconds of CPU; the hostile ones overrun sooner (``tests/bench/bench_parse.py`` measures both).

Bounded memory (issue 11 item 7): at most ``series`` (64) engine series are returned per body, the first 64 in
``labels`` order (so the choice does not depend on line order); the others are dropped and counted in
``dropped_series``. The bytes bound above also bounds the size of every label kept.

Keying: a series is identified by the profile's ``engine_labels`` that the sample carries, sorted by name (vLLM:
``engine`` and ``model_name``; several models or data-parallel engines behind one server stay apart; V0 samples
with only ``model_name`` form a series keyed on it; unlabeled samples form the series ``()``). Labels in the
profile's ``collapse_labels`` (SGLang's ``tp_rank``/``pp_rank``: each rank prints a copy of the same engine's data)
are combined by taking the largest value, never added; every other label (LoRA adapter, mode, reason, ...) is
summed over. When some label sets carry the running gauge, those without it are not engines (SGLang's tokenizer
series next to data-parallel schedulers) and are left out. A sample repeated with an identical label set is a
duplicate; the last one wins (not summed). Values are kept as exposed, NaN and +/-Inf included: consumers must
treat non-finite values as unknown.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from prometheus_client.parser import text_string_to_metric_families

from watchdog.core.profiles import Profile, Selector

__all__ = ["LIMITS", "EngineSnapshot", "ParseLimits", "ParseResult", "engine_series", "escape_label_value",
           "parse_exposition",
           "signal_slots"]

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """The stall signals of one engine series in one scrape (values as exposed; ``None`` = not exposed).

    ``waiting`` already has the profile's ``waiting_ignored`` series taken off (never below 0); ``progress``
    holds one value per :attr:`Profile.progress` selector, in order; ``paused`` is the largest of the
    profile's ``paused`` gauges, and 1 when one of its ``awake`` gauges reads 0 (``None`` when none is exposed).
    """

    labels: Labels
    running: float | None
    waiting: float | None = None
    progress: tuple[float | None, ...] = ()
    paused: float | None = None

    @property
    def key(self) -> str:
        """Stable human string of ``labels``, e.g. ``engine="0",model_name="m"`` (``''`` when unlabeled)."""
        return _key(self.labels)

    def as_dict(self, profile: Profile) -> dict[str, object]:
        """``{"labels": {...}, "running": ..., "waiting": ..., "progress": {selector: value}, "paused": ...}``."""
        return {"labels": dict(self.labels), "running": self.running, "waiting": self.waiting,
                "progress": dict(zip(profile.progress_names(), self.progress, strict=False)),
                "paused": self.paused}


@dataclass(frozen=True)
class ParseResult:
    """What :func:`parse_exposition` found in one body."""

    series: tuple[EngineSnapshot, ...]
    """One snapshot per engine series, sorted by ``labels``."""
    skipped_lines: int
    """Malformed lines of the profile's sample names that were skipped."""
    found_families: frozenset[str]
    """The profile's sample names with at least one valid sample in the body."""
    dropped_series: int = 0
    """Engine series found beyond ``ParseLimits.series`` and left out of ``series``."""
    overrun: str | None = None
    """Why the body was not parsed to the end (a :class:`ParseLimits` bound), else ``None``. When set,
    ``series`` and ``found_families`` are empty: the body is unknown, never evidence."""


@dataclass(frozen=True)
class ParseLimits:
    """Bounds on the work and memory of one :func:`parse_exposition` call (see the module docstring)."""

    lines: int = 500_000
    """Lines in the body (newlines, counted when the body has more bytes than this)."""
    candidate_lines: int = 2_048
    """Lines that pass the name pre-filter (start with one of the profile's sample names)."""
    candidate_bytes: int = 512 << 10
    """Their total length."""
    fallback_lines: int = 256
    """Candidate lines the strict expression rejects, handed to ``prometheus_client`` (the slow path)."""
    fallback_bytes: int = 32 << 10
    """Their total length."""
    series: int = 64
    """Engine series returned; the rest are dropped and counted."""

    def __post_init__(self) -> None:
        for name in ("lines", "candidate_lines", "candidate_bytes", "fallback_lines", "fallback_bytes", "series"):
            if getattr(self, name) < 1:
                raise ValueError(f"ParseLimits.{name} must be >= 1")


LIMITS = ParseLimits()
"""The bounds every caller uses (generous for real expositions; issue 11 items 7 and 8)."""


def _key(labels: Labels) -> str:  # asked for every engine series every cycle: values rarely need escaping
    return ",".join([f'{name}="{value}"' if "\\" not in value and '"' not in value and "\n" not in value
                     else f'{name}="{escape_label_value(value)}"' for name, value in labels])


def escape_label_value(value: str) -> str:
    """A label value as the exposition format and PromQL write it inside double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# A canonical sample line after its name: optional labels without escapes, value, optional timestamp.
# Values/timestamps are then checked with float(); everything this rejects goes to prometheus_client.
_LABEL = rb'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
_REST = re.compile(
    rb"(?:\{((?:" + _LABEL + rb"(?:," + _LABEL + rb")*,?)?)\})?"
    rb"[ \t]+([0-9A-Za-z.+-]+)(?: +([0-9A-Za-z.+-]+))?[ \t\r]*"
)
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark: skipped before the first line
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')  # over the decoded label text (a quote is never in a
# multi-byte sequence, so invalid UTF-8 replaced before matching leaves every pair where it was)


@dataclass(frozen=True)
class _Matcher:
    first_line: re.Pattern[bytes]
    other_lines: re.Pattern[bytes]
    slots_by_name: dict[bytes, tuple[tuple[int, Selector], ...]]
    slots: int


def signal_slots(profile: Profile) -> list[Selector | None]:
    """Every selector of ``profile`` in slot order: running, waiting, waiting_ignored..., progress..., paused...,
    awake..."""
    return [profile.running, profile.waiting, *profile.waiting_ignored, *profile.progress, *profile.paused,
            *profile.awake]


@lru_cache(maxsize=64)
def _matcher(profile: Profile) -> _Matcher:
    slots_by_name: dict[bytes, tuple[tuple[int, Selector], ...]] = {}
    slots = signal_slots(profile)
    for index, selector in enumerate(slots):
        if selector is not None:
            raw = selector.metric.encode()
            slots_by_name[raw] = (*slots_by_name.get(raw, ()), (index, selector))
    alternatives = b"|".join(re.escape(n) for n in sorted(slots_by_name, key=len, reverse=True))
    # A candidate line (groups 1-2: name, rest) or the OpenMetrics end "# EOF" (both groups None).
    line = rb"[ \t]*(?:(" + alternatives + rb")(?=[{ \t])([^\n]*)|# EOF[ \t]*\r?(?=\n|\Z))"
    # "\n" first: the regex engine then jumps from newline to newline at memchr speed.
    return _Matcher(re.compile(line), re.compile(rb"\n" + line), slots_by_name, len(slots))


def parse_exposition(body: bytes | str, profile: Profile, limits: ParseLimits = LIMITS) -> ParseResult:
    """Parse one exposition (bytes, UTF-8; or str) for ``profile``'s signals, within ``limits``.

    Never raises on bad input: malformed lines of the profile's names are skipped and counted; a body beyond
    ``limits`` gives a result with ``overrun`` set and nothing else.
    """
    data = body if isinstance(body, bytes) else body.encode("utf-8", "replace")
    start = len(_BOM) if data.startswith(_BOM) else 0
    # Every line costs the pre-filter one match attempt; lines <= bytes, so only a long body needs counting.
    if len(data) - start > limits.lines and data.count(b"\n", start) > limits.lines:
        return _overrun(f"more than {limits.lines} lines", 0)
    matcher = _matcher(profile)
    engine_labels = sorted(profile.engine_labels)
    collapse_labels = sorted(profile.collapse_labels)
    latest: dict[tuple[int, frozenset[tuple[str, str]]], tuple[Labels, Labels, float]] = {}
    found: set[str] = set()
    skipped = 0
    budget = _Budget(limits)
    matches: Iterable[re.Match[bytes]] = matcher.other_lines.finditer(data, start)
    head = matcher.first_line.match(data, start)
    if head is not None:
        matches = itertools.chain((head,), matches)
    try:
        for match in matches:
            raw_name, rest = match.groups()
            if raw_name is None:
                break  # "# EOF": OpenMetrics says nothing follows it, so nothing after it is read
            parsed = budget.parse(raw_name, rest)
            if parsed is None:
                skipped += 1
                continue
            labels, value = parsed
            kept: tuple[frozenset[tuple[str, str]], Labels, Labels] | None = None
            for index, selector in matcher.slots_by_name[raw_name]:
                if not selector.match or selector.matches(labels):
                    kept = kept or _identity(labels, engine_labels, collapse_labels)
                    latest[(index, kept[0])] = (kept[1], kept[2], value)
                    found.add(selector.metric)
    except _Overrun as exc:
        return _overrun(str(exc), skipped)
    return _aggregate(latest, matcher.slots, profile, limits, skipped, found)


def _identity(labels: Mapping[str, str], engine_labels: list[str],
              collapse_labels: list[str]) -> tuple[frozenset[tuple[str, str]], Labels, Labels]:
    """One sample's label set (a repeat of it is a duplicate: the last one wins), its engine series key and its rank
    (collapse labels); once per line, whatever the number of slots it feeds."""
    key = tuple([(n, labels[n]) for n in engine_labels if n in labels])
    rank = tuple([(n, labels[n]) for n in collapse_labels if n in labels]) if collapse_labels else ()
    return frozenset(labels.items()), key, rank


def _aggregate(latest: dict[tuple[int, frozenset[tuple[str, str]]], tuple[Labels, Labels, float]], slots: int,
               profile: Profile, limits: ParseLimits, skipped: int, found: set[str]) -> ParseResult:
    """Sum every slot's samples per engine series and rank, then take the largest rank's value."""
    per_rank: dict[tuple[Labels, int, Labels], float] = {}
    for (index, _), (key, rank, value) in latest.items():
        previous = per_rank.get((key, index, rank))
        per_rank[(key, index, rank)] = value if previous is None else previous + value
    totals: dict[Labels, list[float | None]] = {}
    for (key, index, _), value in per_rank.items():
        row = totals.setdefault(key, [None] * slots)
        previous = row[index]
        row[index] = value if previous is None or _larger(value, previous) else previous
    return engine_series(totals, profile, found, limits, skipped)


def engine_series(totals: Mapping[Labels, list[float | None]], profile: Profile, found: Iterable[str],
                  limits: ParseLimits = LIMITS, skipped: int = 0) -> ParseResult:
    """The engine series of ``totals`` (per engine key, one value per signal slot, already summed over other
    labels and the largest over collapse labels): sorted by key, label sets without running dropped when any
    has one, ``waiting`` minus ``waiting_ignored``, paused and awake folded, at most ``limits.series``.
    ``found``: the metric names seen."""
    keys = sorted(totals)
    if any(totals[key][0] is not None for key in keys):  # label sets without running join no engine
        keys = [key for key in keys if totals[key][0] is not None]
    bounds = _bounds(profile)
    series = tuple(_snapshot(key, totals[key], bounds) for key in keys[: limits.series])
    return ParseResult(series=series, skipped_lines=skipped, found_families=frozenset(found),
                       dropped_series=len(keys) - len(series))


def _larger(value: float, previous: float) -> bool:
    """``value > previous`` where NaN is the smallest (a rank that says NaN never hides a real value)."""
    return previous != previous or value > previous


def _bounds(profile: Profile) -> tuple[int, int, int]:
    """Where a slot row's ignored-waiting, progress and paused values end (awake values follow)."""
    ignored_end = 2 + len(profile.waiting_ignored)
    progress_end = ignored_end + len(profile.progress)
    return ignored_end, progress_end, progress_end + len(profile.paused)


def _snapshot(key: Labels, row: list[float | None], bounds: tuple[int, int, int]) -> EngineSnapshot:
    ignored_end, progress_end, paused_end = bounds
    waiting = row[1]
    if waiting is not None and ignored_end > 2:
        ignored = sum([v for v in row[2:ignored_end] if v is not None and _count(v)])
        if ignored and _count(waiting):  # an invalid waiting stays invalid (unknown)
            waiting = max(0.0, waiting - ignored)
    paused: float | None = None
    for value in row[progress_end:paused_end]:
        if value is not None and (paused is None or _larger(value, paused)):
            paused = value
    for value in row[paused_end:]:  # awake gauges: 0 means asleep
        if value is not None and _count(value):
            asleep = 1.0 if value == 0 else 0.0
            paused = asleep if paused is None or _larger(asleep, paused) else paused
    return EngineSnapshot(key, row[0], waiting, tuple(row[ignored_end:progress_end]), paused)


def _count(value: float) -> bool:
    """A finite, non-negative value (what a gauge of requests may hold)."""
    return value >= 0 and value != math.inf


class _Overrun(Exception):
    """A :class:`ParseLimits` bound was exceeded; the message says which."""


class _Budget:
    """Parses candidate lines while counting them against :class:`ParseLimits`."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self.lines = self.bytes = self.fallback_lines = self.fallback_bytes = 0

    def parse(self, raw_name: bytes, rest: bytes) -> tuple[dict[str, str], float] | None:
        """Labels and value of one candidate line, None if malformed; raises _Overrun past a bound."""
        limits, size = self.limits, len(raw_name) + len(rest)
        self.lines += 1
        self.bytes += size
        if self.lines > limits.candidate_lines:
            raise _Overrun(f"more than {limits.candidate_lines} lines of the profile's metrics")
        if self.bytes > limits.candidate_bytes:
            raise _Overrun(f"lines of the profile's metrics over {limits.candidate_bytes} bytes")
        parsed = _parse_fast(rest)
        if parsed is not None:
            return parsed
        self.fallback_lines += 1
        self.fallback_bytes += size
        if self.fallback_lines > limits.fallback_lines:
            raise _Overrun(f"more than {limits.fallback_lines} non-canonical lines of the profile's metrics")
        if self.fallback_bytes > limits.fallback_bytes:
            raise _Overrun(f"non-canonical lines of the profile's metrics over {limits.fallback_bytes} bytes")
        return _parse_slow(raw_name + rest, raw_name.decode())


def _overrun(reason: str, skipped: int) -> ParseResult:
    return ParseResult(series=(), skipped_lines=skipped, found_families=frozenset(), overrun=reason)


def _parse_fast(rest: bytes) -> tuple[dict[str, str], float] | None:
    """Labels and value of a canonical line (``rest`` = what follows the name), or None to go slow."""
    match = _REST.fullmatch(rest)
    if match is None:
        return None
    label_text, value_text, timestamp_text = match.groups()
    try:
        value = float(value_text)
        if timestamp_text is not None:
            float(timestamp_text)
    except ValueError:
        return None
    if not label_text:
        return {}, value
    pairs = _PAIR.findall(label_text.decode("utf-8", "replace"))
    labels = dict(pairs)
    if len(labels) != len(pairs):
        return None  # duplicate label name: let prometheus_client judge it
    return labels, value


def _parse_slow(line: bytes, name: str) -> tuple[dict[str, str], float] | None:
    """Parse one sample line with prometheus_client; None if it is malformed or not a ``name`` sample."""
    text = line.decode("utf-8", "replace")
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except Exception:  # the parser raises ValueError, IndexError, ... on malformed input
        return None
    if len(samples) != 1 or samples[0].name != name:
        return None
    return dict(samples[0].labels), float(samples[0].value)
