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
The names are one pattern factored by common prefixes, so a line's name is compared once, not once per name.
Each kept line is split at its last space into what precedes the value (the label text) and the value (a
regular expression doing that split backtracked over long lines: 237 ms for one 7.8 MB line of value-like fields);
a label text is checked by a strict regular expression (canonical lines: ``name{a="b",...} value [timestamp]``
with no backslash escapes), decoded and matched against the selectors once and then remembered per profile (a
fleet's pods print the same few label texts every scrape; only the value is new) -- only when every value after it
makes a canonical line, so a timestamped line is read whole by the strict expression each time. Anything else goes
to ``prometheus_client``'s parser (``text_string_to_metric_families`` on that one line). A line that neither
accepts is skipped and counted in ``skipped_lines``; the rest of the body is still used. The tests check that the
result equals a full ``prometheus_client`` parse of each fixture. Lines of other families are never parsed, so
garbage there is neither noticed nor counted. ``*_created`` samples are ignored like any other line. The first line
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
``dropped_series``. The bytes bound above also bounds the size of every label kept. The remembered label texts
are at most 4,096 per profile (emptied when full), each of at most 512 bytes (a longer one is decoded every time).

Keying: a series is identified by the profile's ``engine_labels`` that the sample carries, sorted by name (vLLM:
``engine`` and ``model_name``; several models or data-parallel engines behind one server stay apart; V0 samples
with only ``model_name`` form a series keyed on it; unlabeled samples form the series ``()``). Labels in the
profile's ``collapse_labels`` (SGLang's ``tp_rank``/``pp_rank``: each rank prints a copy of the same engine's data)
are combined by taking the largest value, never added; every other label (LoRA adapter, mode, reason, ...) is
summed over. When some label sets carry the running gauge, those without it are not engines of their own (SGLang's
tokenizer series next to data-parallel schedulers) and are left out -- except the pod-scoped one: samples with none
of the engine labels (key ``()``; vLLM's ``rl_weight_update_operations_in_flight{operation}`` and
``sleep_mode_operations_in_flight{operation}``) are about the whole server, so they apply to EVERY engine series
of the body (:func:`engine_series`, the one place of the rule, for both sources): any pod-scoped pause pauses
every engine; a pod-scoped progress counter is a progress signal of every engine (a gauge only when the body has
one engine series); an engine's running and waiting are only ever its own. A sample repeated with an identical
label set is a duplicate; the last one wins (not summed). Values are kept as exposed, NaN and +/-Inf included:
consumers must treat non-finite values as unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from watchdog.core.lines import LIMITS, Labels, Latest, Overrun, ParseLimits, matcher, signal_slots
from watchdog.core.profiles import Profile

__all__ = ["LIMITS", "EngineSnapshot", "ParseLimits", "ParseResult", "engine_series", "escape_label_value",
           "parse_exposition",
           "signal_slots"]



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


#: Keys already written (a fleet's engines carry the same few label sets every cycle): at most 4,096, each at
#: most 512 characters (a longer one is written each time), emptied when full. A cache of a pure function.
_KEYS: dict[Labels, str] = {}


def _key(labels: Labels) -> str:  # asked for every engine series every cycle
    key = _KEYS.get(labels)
    if key is None:
        key = _write_key(labels)
        if len(key) <= 512:
            if len(_KEYS) >= 4096:
                _KEYS.clear()
            _KEYS[labels] = key
    return key


def _write_key(labels: Labels) -> str:  # values rarely need escaping
    return ",".join([f'{name}="{value}"' if "\\" not in value and '"' not in value and "\n" not in value
                     else f'{name}="{escape_label_value(value)}"' for name, value in labels])


def escape_label_value(value: str) -> str:
    """A label value as the exposition format and PromQL write it inside double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark: skipped before the first line



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
    lines = matcher(profile)
    try:
        latest, skipped = lines.read(data, start, limits)
    except Overrun as exc:
        return _overrun(str(exc), exc.skipped)
    return _aggregate(latest, len(lines.metrics), profile, limits, skipped,
                      {lines.metrics[index] for index, _ in latest})


def _aggregate(latest: Latest, slots: int, profile: Profile, limits: ParseLimits, skipped: int,
               found: set[str]) -> ParseResult:
    """Sum every slot's samples per engine series and rank, then take the largest rank's value."""
    if not profile.collapse_labels:  # one rank: the sums are the values (vLLM; one pass, no per-rank dict)
        sums: dict[Labels, list[float | None]] = {}
        for (index, _), (key, _, value) in latest.items():
            row = sums.get(key)
            if row is None:
                row = sums[key] = [None] * slots
            previous = row[index]
            row[index] = value if previous is None else previous + value
        return engine_series(sums, profile, found, limits, skipped)
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
    has one, the pod-scoped label set applied to every engine (:func:`_pod_scoped`), ``waiting`` minus
    ``waiting_ignored``, paused and awake folded, at most ``limits.series``. ``found``: the metric names seen.
    The one last step both sources share (a scraped body, and a pod's rows from Prometheus)."""
    keys = sorted(totals)
    if any(totals[key][0] is not None for key in keys):  # label sets without running are no engine of their own
        keys = [key for key in keys if totals[key][0] is not None]
    pod = totals.get(())  # carries none of the engine labels: pod-scoped
    if pod is not None and pod[0] is None and len(keys) > 1:
        keys = [key for key in keys if key]  # not an engine of its own when the body has engine series
    bounds = _bounds(profile)
    if pod is None:
        series = tuple(_snapshot(key, totals[key], bounds) for key in keys[: limits.series])
    else:
        fill, paused = _pod_scoped(pod, profile, bounds, engines=len(keys))
        series = tuple(_snapshot(key, _fill(totals[key], pod, fill), bounds, paused) if key
                       else _snapshot(key, totals[key], bounds) for key in keys[: limits.series])
    return ParseResult(series=series, skipped_lines=skipped, found_families=frozenset(found),
                       dropped_series=len(keys) - len(series))


def _pod_scoped(pod: list[float | None], profile: Profile, bounds: tuple[int, int, int],
                engines: int) -> tuple[tuple[int, ...], float | None]:
    """What the pod-scoped label set (a signal's samples with none of the profile's ``engine_labels``: vLLM's
    ``rl_weight_update_operations_in_flight{operation}`` and ``sleep_mode_operations_in_flight{operation}``)
    gives EVERY engine series of the body: (the slots whose pod-scoped value an engine takes when it has none of
    its own, the paused value every engine's is combined with). ``engines``: how many engine series there are.

    - paused and awake gauges: folded as for an engine (largest paused; an awake gauge reading 0 is 1), then
      the largest of that and each engine's own: any pod-scoped pause pauses every engine, and a pod-scoped 0 or
      NaN never hides an engine's own pause.
    - progress counters: a progress signal of every engine. Flat, no engine moved it: evidence for each, as its
      own counter would be. Moving, it cannot say whose: each engine reads it as progress, so in a pod of
      several engines one wedged engine is not seen while another moves it -- a missed stall, never a wrong
      deletion. Progress gauges only when the body has ONE engine series (then it is that engine's): a pod-wide
      gauge (a sum or a maximum over engines) can stay flat while one engine's share moves; otherwise unknown.
    - ``waiting_ignored``: subtracted from each engine's own waiting (only ever makes an engine less busy).
    - running and waiting: never. An engine's load is its own; a pod-wide count would make an idle engine busy,
      evidence it does not have.
    """
    ignored_end = bounds[0]
    fill = (*range(2, ignored_end), *(ignored_end + i for i, s in enumerate(profile.progress)
                                      if s.kind == "counter" or engines == 1))
    return fill, _snapshot((), pod, bounds).paused


def _fill(row: list[float | None], pod: list[float | None], slots: tuple[int, ...]) -> list[float | None]:
    """``row`` with each of ``slots`` it has no value for taken from the pod-scoped ``pod`` (its own first)."""
    filled = list(row)
    for index in slots:
        if filled[index] is None:
            filled[index] = pod[index]
    return filled


def _larger(value: float, previous: float) -> bool:
    """``value > previous`` where NaN is the smallest (a rank that says NaN never hides a real value)."""
    return previous != previous or value > previous


def _bounds(profile: Profile) -> tuple[int, int, int]:
    """Where a slot row's ignored-waiting, progress and paused values end (awake values follow)."""
    ignored_end = 2 + len(profile.waiting_ignored)
    progress_end = ignored_end + len(profile.progress)
    return ignored_end, progress_end, progress_end + len(profile.paused)


def _snapshot(key: Labels, row: list[float | None], bounds: tuple[int, int, int],
              pod_paused: float | None = None) -> EngineSnapshot:
    ignored_end, progress_end, paused_end = bounds
    waiting = row[1]
    if waiting is not None and ignored_end > 2:
        ignored = sum([v for v in row[2:ignored_end] if v is not None and _count(v)])
        if ignored and _count(waiting):  # an invalid waiting stays invalid (unknown)
            waiting = max(0.0, waiting - ignored)
    paused = pod_paused  # the pod-scoped pause, combined like one more paused gauge
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


def _overrun(reason: str, skipped: int) -> ParseResult:
    return ParseResult(series=(), skipped_lines=skipped, found_families=frozenset(), overrun=reason)


