"""PURE: the sample lines of one profile's names, for :mod:`watchdog.core.parsing`: the pre-filter pattern, the
strict expression for canonical lines, the label texts remembered between scrapes, the bounded slow path
(``prometheus_client``) and the counting of all of it against :class:`ParseLimits`. The module docstring of
:mod:`watchdog.core.parsing` says what a line means; this module only finds, reads and counts lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

from watchdog.core.profiles import Profile, Selector

__all__ = ["LIMITS", "Budget", "Feeds", "Labels", "Matcher", "Overrun", "ParseLimits", "matcher", "scrape_url",
           "signal_slots"]

Labels = tuple[tuple[str, str], ...]


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


# A canonical sample line after its name: optional labels without escapes, value, optional timestamp.
# Values/timestamps are then checked with float(); everything this rejects goes to prometheus_client.
_LABEL = rb'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
_REST = re.compile(
    rb"(?:\{((?:" + _LABEL + rb"(?:," + _LABEL + rb")*,?)?)\})?"
    rb"[ \t]+([0-9A-Za-z.+-]+)(?: +([0-9A-Za-z.+-]+))?[ \t\r]*"
)
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')  # over the decoded label text (a quote is never in a
# multi-byte sequence, so invalid UTF-8 replaced before matching leaves every pair where it was)


Feeds = tuple[tuple[int, frozenset[tuple[str, str]], Labels, Labels, str], ...]
"""What one sample line feeds: per slot whose selector it satisfies, (slot index, its label set, engine series key,
rank, metric name)."""

_KNOWN_ENTRIES = 4_096  # label texts remembered per profile: a fleet's pods repeat the same few every scrape
_KNOWN_TEXT = 512  # bytes; a longer label text is decoded every time (keeps the memory bound ~4 MiB per profile)


@dataclass(frozen=True)
class Matcher:
    first_line: re.Pattern[bytes]
    other_lines: re.Pattern[bytes]
    slots_by_name: dict[bytes, tuple[tuple[int, Selector], ...]]
    slots: int
    engine_labels: list[str]
    collapse_labels: list[str]
    known: dict[tuple[bytes, bytes], Feeds]
    """(sample name, label text) -> what it feeds: a line's labels are decoded and matched once, not every scrape.
    Never more than ``_KNOWN_ENTRIES`` (emptied when full), texts of at most ``_KNOWN_TEXT`` bytes."""

    def feeds(self, raw_name: bytes, labels: Mapping[str, str]) -> Feeds:
        identity: tuple[frozenset[tuple[str, str]], Labels, Labels] | None = None
        fed = []
        for index, selector in self.slots_by_name[raw_name]:
            if not selector.match or selector.matches(labels):
                identity = identity or _identity(labels, self.engine_labels, self.collapse_labels)
                fed.append((index, *identity, selector.metric))
        return tuple(fed)

    def feeds_of_text(self, raw_name: bytes, label_text: bytes) -> Feeds | None:
        """What a canonical line with ``label_text`` feeds, or None when it repeats a label name (the slow path
        judges it)."""
        fed = self.known.get((raw_name, label_text))
        if fed is not None:
            return fed
        pairs = _PAIR.findall(label_text.decode("utf-8", "replace")) if label_text else []
        labels = dict(pairs)
        if len(labels) != len(pairs):
            return None
        fed = self.feeds(raw_name, labels)
        if len(label_text) <= _KNOWN_TEXT:
            if len(self.known) >= _KNOWN_ENTRIES:
                self.known.clear()
            self.known[(raw_name, label_text)] = fed
        return fed


def signal_slots(profile: Profile) -> list[Selector | None]:
    """Every selector of ``profile`` in slot order: running, waiting, waiting_ignored..., progress..., paused...,
    awake..."""
    return [profile.running, profile.waiting, *profile.waiting_ignored, *profile.progress, *profile.paused,
            *profile.awake]


@lru_cache(maxsize=64)
def _names_query(profile: Profile) -> str:
    return urlencode([("name[]", name) for name in sorted({s.metric for s in signal_slots(profile) if s})])


def scrape_url(url: str, profile: Profile) -> str:
    """``url`` asking for ``profile``'s sample names only (``name[]=...``, prometheus_client's filter: vLLM's
    ``/metrics`` then renders ~20 lines per engine instead of ~690, and the parser reads nothing else anyway). A
    server that ignores the query sends its whole exposition, read the same way: the parser never depends on it."""
    return f"{url}{'&' if '?' in url else '?'}{_names_query(profile)}"


def _trie(names: list[bytes]) -> bytes:
    """A pattern matching exactly ``names``, factored by common prefixes (``a(?:b|c)`` rather than ``ab|ac``): the
    regex engine then compares a line's name once, not once per alternative (~20% of the pre-filter's time).
    Recursion only where names branch, so its depth is at most the number of names, whatever their length."""
    first, last = min(names), max(names)  # what the smallest and the largest share, every name shares
    prefix = first[: next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))]
    tails = [name[len(prefix):] for name in names]
    groups: dict[bytes, list[bytes]] = {}
    for tail in tails:
        if tail:
            groups.setdefault(tail[:1], []).append(tail)
    if not groups:
        return re.escape(prefix)
    branches = [_trie(group) for _, group in sorted(groups.items())]
    inner = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
    return re.escape(prefix) + (b"(?:" + inner + b")?" if b"" in tails else inner)


@lru_cache(maxsize=64)
def matcher(profile: Profile) -> Matcher:
    slots_by_name: dict[bytes, tuple[tuple[int, Selector], ...]] = {}
    slots = signal_slots(profile)
    for index, selector in enumerate(slots):
        if selector is not None:
            raw = selector.metric.encode()
            slots_by_name[raw] = (*slots_by_name.get(raw, ()), (index, selector))
    alternatives = _trie(sorted(slots_by_name))
    # A candidate line (groups 1-2: name, rest) or the OpenMetrics end "# EOF" (both groups None).
    line = rb"[ \t]*(?:(" + alternatives + rb")(?=[{ \t])([^\n]*)|# EOF[ \t]*\r?(?=\n|\Z))"
    # "\n" first: the regex engine then jumps from newline to newline at memchr speed.
    return Matcher(re.compile(line), re.compile(rb"\n" + line), slots_by_name, len(slots),
                    sorted(profile.engine_labels), sorted(profile.collapse_labels), {})


def _identity(labels: Mapping[str, str], engine_labels: list[str],
              collapse_labels: list[str]) -> tuple[frozenset[tuple[str, str]], Labels, Labels]:
    """One sample's label set (a repeat of it is a duplicate: the last one wins), its engine series key and its rank
    (collapse labels); once per line, whatever the number of slots it feeds."""
    key = tuple([(n, labels[n]) for n in engine_labels if n in labels])
    rank = tuple([(n, labels[n]) for n in collapse_labels if n in labels]) if collapse_labels else ()
    return frozenset(labels.items()), key, rank


class Overrun(Exception):
    """A :class:`ParseLimits` bound was exceeded; the message says which."""


class Budget:
    """Parses candidate lines while counting them against :class:`ParseLimits`."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self.lines = self.bytes = self.fallback_lines = self.fallback_bytes = 0

    def parse(self, raw_name: bytes, rest: bytes, matcher: Matcher) -> tuple[Feeds, float] | None:
        """What one candidate line feeds and its value, None if malformed; raises Overrun past a bound."""
        limits, size = self.limits, len(raw_name) + len(rest)
        self.lines += 1
        self.bytes += size
        if self.lines > limits.candidate_lines:
            raise Overrun(f"more than {limits.candidate_lines} lines of the profile's metrics")
        if self.bytes > limits.candidate_bytes:
            raise Overrun(f"lines of the profile's metrics over {limits.candidate_bytes} bytes")
        fast = parse_fast(rest)
        if fast is not None:
            fed = matcher.feeds_of_text(raw_name, fast[0])
            if fed is not None:
                return fed, fast[1]
        self.fallback_lines += 1
        self.fallback_bytes += size
        if self.fallback_lines > limits.fallback_lines:
            raise Overrun(f"more than {limits.fallback_lines} non-canonical lines of the profile's metrics")
        if self.fallback_bytes > limits.fallback_bytes:
            raise Overrun(f"non-canonical lines of the profile's metrics over {limits.fallback_bytes} bytes")
        slow = parse_slow(raw_name + rest, raw_name.decode())
        return None if slow is None else (matcher.feeds(raw_name, slow[0]), slow[1])


def parse_fast(rest: bytes) -> tuple[bytes, float] | None:
    """Label text (between the braces, ``b""`` without) and value of a canonical line (``rest`` = what follows
    the name), or None to go slow."""
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
    return label_text or b"", value


def parse_slow(line: bytes, name: str) -> tuple[dict[str, str], float] | None:
    """Parse one sample line with prometheus_client; None if it is malformed or not a ``name`` sample."""
    text = line.decode("utf-8", "replace")
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except Exception:  # the parser raises ValueError, IndexError, ... on malformed input
        return None
    if len(samples) != 1 or samples[0].name != name:
        return None
    return dict(samples[0].labels), float(samples[0].value)
