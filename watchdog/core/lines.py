"""PURE: the sample lines of one profile's names, for :mod:`watchdog.core.parsing`: the pre-filter pattern, the
strict expression for canonical lines, the label texts remembered between scrapes, the bounded slow path
(``prometheus_client``) and the counting of all of it against :class:`ParseLimits`. The module docstring of
:mod:`watchdog.core.parsing` says what a line means; this module only finds, reads and counts lines.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

from watchdog.core.profiles import Profile, Selector

__all__ = ["LIMITS", "Budget", "Feeds", "Labels", "Latest", "Matcher", "Overrun", "ParseLimits", "Slot", "matcher",
           "scrape_url", "signal_slots"]

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


# A canonical sample line after its name: optional labels without escapes, value, optional timestamp (both then
# checked with float()). Everything it rejects goes to prometheus_client.
_LABEL = rb'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
_REST = re.compile(
    rb"(?:\{((?:" + _LABEL + rb"(?:," + _LABEL + rb")*,?)?)\})?"
    rb"[ \t]+([0-9A-Za-z.+-]+)(?: +([0-9A-Za-z.+-]+))?[ \t\r]*"
)
_VALUE = re.compile(rb"[0-9A-Za-z.+-]+[\t\r]*")  # what follows a canonical line's last space (_REST's value)
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')  # over the decoded label text (a quote is never in a
# multi-byte sequence, so invalid UTF-8 replaced before matching leaves every pair where it was)


Slot = tuple[int, frozenset[tuple[str, str]]]
"""A signal slot's index and one label set of its samples (a repeat of it is a duplicate: the last one wins)."""
Feeds = tuple[tuple[Slot, Labels, Labels], ...]
"""What one sample line feeds: per slot whose selector it satisfies, (its :data:`Slot`, engine series key, rank)."""
Latest = dict[Slot, tuple[Labels, Labels, float]]
"""What a body's lines fed, per :data:`Slot`: the last sample's (engine series key, rank, value)."""

_KNOWN_ENTRIES = 4_096  # heads remembered per profile: a fleet's pods repeat the same few every scrape
_KNOWN_TEXT = 512  # bytes; a longer head is read every time (keeps the memory bound ~4 MiB per profile)


@dataclass(frozen=True)
class Matcher:
    first_line: re.Pattern[bytes]
    other_lines: re.Pattern[bytes]
    """The pre-filter (the body's first line; every other, after its ``\\n``): a line of the profile's names (groups
    1-2: name, what follows it), or the OpenMetrics end ``# EOF`` (both groups None)."""
    slots_by_name: dict[bytes, tuple[tuple[int, Selector], ...]]
    metrics: tuple[str, ...]
    """The metric name of each slot (``""`` for an absent selector)."""
    engine_labels: list[str]
    collapse_labels: list[str]
    known: dict[tuple[bytes, bytes], Feeds]
    """(sample name, what is between it and the value) that make a canonical line with any value (:meth:`_remember`)
    -> what such a line feeds: a line's labels are checked, decoded and matched once, not every scrape; only the value
    is new. Never more than ``_KNOWN_ENTRIES`` (emptied when full), texts of at most ``_KNOWN_TEXT`` bytes."""

    def feeds(self, raw_name: bytes, labels: Mapping[str, str]) -> Feeds:
        identity: tuple[frozenset[tuple[str, str]], Labels, Labels] | None = None
        fed = []
        for index, selector in self.slots_by_name[raw_name]:
            if not selector.match or selector.matches(labels):
                identity = identity or _identity(labels, self.engine_labels, self.collapse_labels)
                fed.append(((index, identity[0]), identity[1], identity[2]))
        return tuple(fed)

    def feeds_of_text(self, raw_name: bytes, label_text: bytes) -> Feeds | None:
        """What a canonical line with ``label_text`` feeds, or None when it repeats a label name (the slow path
        judges it)."""
        pairs = _PAIR.findall(label_text.decode("utf-8", "replace")) if label_text else []
        labels = dict(pairs)
        return self.feeds(raw_name, labels) if len(labels) == len(pairs) else None

    def read(self, data: bytes, start: int, limits: ParseLimits) -> tuple[Latest, int]:
        """What the lines of ``data`` from ``start`` feed, and how many of them were skipped (malformed); raises
        :class:`Overrun` past a bound of ``limits``. Reads nothing after ``# EOF``."""
        latest: Latest = {}
        known, budget = self.known, Budget(limits)
        lines = size = 0
        matches: Iterable[re.Match[bytes]] = self.other_lines.finditer(data, start)
        first = self.first_line.match(data, start)
        if first is not None:
            matches = itertools.chain((first,), matches)
        for match in matches:
            raw_name, rest = match.groups()
            if raw_name is None:
                break  # "# EOF": OpenMetrics says nothing follows it, so nothing after it is read
            lines += 1
            size += len(raw_name) + len(rest)
            if lines > limits.candidate_lines or size > limits.candidate_bytes:
                raise budget.overrun(lines)
            labels, _, value = rest.rpartition(b" ")  # a line without a space: value is rest, never _VALUE
            fed = None
            if _VALUE.fullmatch(value):
                fed = known.get((raw_name, labels))
                if fed is None:
                    fed = self._remember(raw_name, labels)
            if fed is not None:
                try:
                    number = float(value)
                except ValueError:
                    fed = None
            if fed is None:
                got = budget.other(raw_name, rest, self)
                if got is None:
                    continue
                fed, number = got
            for slot, key, rank in fed:
                latest[slot] = (key, rank, number)
        return latest, budget.skipped

    def _remember(self, raw_name: bytes, labels: bytes) -> Feeds | None:
        """What a line of ``raw_name``, ``labels``, a space and a value feeds (remembered), when every such line with
        a value the pre-filter accepts is canonical (:data:`_REST`, no timestamp) and repeats no label name; else
        None: this line is then read on its own (:meth:`Budget.other`)."""
        fast = _REST.fullmatch(labels + b" 0")  # its value is never part of what is remembered
        if fast is None or fast[3] is not None:  # a timestamp: "0" was it
            return None
        fed = self.feeds_of_text(raw_name, fast[1] or b"")
        if fed is not None and len(labels) <= _KNOWN_TEXT:
            if len(self.known) >= _KNOWN_ENTRIES:
                self.known.clear()
            self.known[(raw_name, labels)] = fed
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
    names = _trie(sorted(slots_by_name))
    # A candidate line (groups 1-2: name, rest) or the OpenMetrics end "# EOF" (both groups None).
    line = rb"[ \t]*(?:(" + names + rb")(?=[{ \t])([^\n]*)|# EOF[ \t]*\r?(?=\n|\Z))"
    # "\n" first: the regex engine then jumps from newline to newline at memchr speed.
    return Matcher(re.compile(line), re.compile(rb"\n" + line), slots_by_name,
                   tuple(s.metric if s else "" for s in slots), sorted(profile.engine_labels),
                   sorted(profile.collapse_labels), {})


def _identity(labels: Mapping[str, str], engine_labels: list[str],
              collapse_labels: list[str]) -> tuple[frozenset[tuple[str, str]], Labels, Labels]:
    """One sample's label set (a repeat of it is a duplicate: the last one wins), its engine series key and its rank
    (collapse labels); once per line, whatever the number of slots it feeds."""
    key = tuple([(n, labels[n]) for n in engine_labels if n in labels])
    rank = tuple([(n, labels[n]) for n in collapse_labels if n in labels]) if collapse_labels else ()
    return frozenset(labels.items()), key, rank


class Overrun(Exception):
    """A :class:`ParseLimits` bound was exceeded; the message says which. ``skipped``: the lines skipped before."""

    def __init__(self, reason: str, skipped: int) -> None:
        super().__init__(reason)
        self.skipped = skipped


class Budget:
    """The slow path of one body's candidate lines, counted against :class:`ParseLimits`."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self.lines = self.bytes = self.skipped = 0

    def overrun(self, lines: int) -> Overrun:
        """The candidate lines bound that ``lines`` of them, or their bytes, exceeded."""
        limits = self.limits
        return Overrun(f"more than {limits.candidate_lines} lines of the profile's metrics"
                       if lines > limits.candidate_lines
                       else f"lines of the profile's metrics over {limits.candidate_bytes} bytes", self.skipped)

    def other(self, raw_name: bytes, rest: bytes, matcher: Matcher) -> tuple[Feeds, float] | None:
        """What a candidate line (``rest``: what follows its name) not read from a remembered label text feeds and
        its value: canonical (:func:`parse_fast`), or else by the slow path, counted; None if malformed (counted in
        ``skipped``); raises Overrun past a bound."""
        fast = parse_fast(rest)
        if fast is not None:
            fed = matcher.feeds_of_text(raw_name, fast[0])
            if fed is not None:
                return fed, fast[1]
        limits = self.limits
        self.lines += 1
        self.bytes += len(raw_name) + len(rest)
        if self.lines > limits.fallback_lines:
            raise Overrun(f"more than {limits.fallback_lines} non-canonical lines of the profile's metrics",
                          self.skipped)
        if self.bytes > limits.fallback_bytes:
            raise Overrun(f"non-canonical lines of the profile's metrics over {limits.fallback_bytes} bytes",
                          self.skipped)
        slow = parse_slow(raw_name + rest, raw_name.decode())
        if slow is None:
            self.skipped += 1
            return None
        return matcher.feeds(raw_name, slow[0]), slow[1]


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
