"""The stall detector: a pure function from scrape samples of one engine series to a verdict.

Pure by contract (checked by an import-linter contract in ``pyproject.toml``): no I/O, no clock reads, no
``kubernetes``/``requests``. Time is whatever the caller puts in :attr:`Sample.t` (seconds on a monotonic
clock).

The rules, each one pinned by a test in ``tests/core/test_detector.py``:

1. *Busy* means ``running > 0`` (with ``count_waiting``: ``running + waiting > 0``). A sample that is not busy is
   ``idle``; idle is never stalled and it ends any stall clock.
2. *Progress* means any progress signal of the profile (token counters, step counters, a KV-cache usage gauge)
   changed since the last known value of that signal. A counter that went down is a reset (engine restart):
   it re-baselines and counts as progress, never as a stall.
3. The stall clock starts at ``t`` of the latest sample that showed progress, or of the first busy sample after
   an idle sample (or the first sample ever seen), whichever is later.
4. ``stalled`` when the latest sample is busy, nothing progressed since the clock started,
   ``t - clock_start >= window_s - slack`` and at least ``min_samples`` known busy samples lie in
   ``[clock_start, t]`` (both ends included). Busy without progress before that is ``suspect``. The slack
   (:func:`window_slack`: 1% of the window, at most 1 s) absorbs the jitter of samples taken on a schedule: with
   a window that is a whole number of intervals (120 s at 15 s), a sample a millisecond early must not cost a
   whole interval more. It never lets fewer than ``min_samples`` samples decide.
5. *Unknown* samples (``running`` missing, or every progress signal missing while busy; NaN, +/-Inf and
   negative values count as missing) are never evidence: they do not start, advance or satisfy the clock, and do
   not move the baselines. A verdict on an unknown latest sample is ``unknown``. A gap of unknowns inside a
   running clock leaves the clock where it was: the counters are cumulative, so a counter that has not risen
   across the gap did not rise during it; but the gap adds no samples towards ``min_samples``. A known
   ``running`` of 0 (not busy) with every progress signal missing is idle (or paused), not unknown: an engine
   that has served nothing yet has no labelled counters (a fresh SGLang server), and nothing runs to be stalled.
   Busy with every progress signal missing stays unknown.
6. ``t`` going backwards (clock reset, restarted caller) re-baselines as if the sample were the first one
   ever seen, so it can never produce a stall.
7. *Paused*: a sample whose ``paused`` value is known and above 0 (the engine sleeps or was paused on purpose,
   e.g. vLLM sleep mode) is ``paused``: like idle it is never stalled and it ends any stall clock.
8. *Completion-only evidence*: a progress signal the profile marks ``completion_only`` moves only when a request
   finishes (TensorRT-LLM's and SGLang's token counters), so one request running longer than the window keeps
   it flat. A busy sample without progress whose only known progress signals are completion-only is
   ``unknown`` (it neither starts nor advances the clock) unless ``completion_window_s`` is set; then it is
   judged with that longer window. Any signal moving, completion-only ones included, is progress.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from watchdog.core.confirm import is_paused, known, known_all, live_evidence, missing_among, signal_name
from watchdog.core.profiles import Selector
from watchdog.core.vocab import EngineState

__all__ = ["DEFAULT_MIN_SAMPLES", "DEFAULT_WINDOW_S", "DetectorState", "Sample", "Verdict", "detect",
           "window_reached", "window_slack"]

DEFAULT_WINDOW_S = 120.0
DEFAULT_MIN_SAMPLES = 3
SLACK_FRACTION = 0.01  # of the window (rule 4)
SLACK_MAX_S = 1.0


def window_slack(window_s: float) -> float:
    """Seconds by which a stall may fall short of ``window_s`` and still count as the window (rule 4): the
    jitter of scheduled samples, 1% of the window, at most 1 s."""
    return min(SLACK_MAX_S, SLACK_FRACTION * window_s)


def window_reached(elapsed_s: float, window_s: float) -> bool:
    """Whether ``elapsed_s`` seconds count as ``window_s`` (rule 4, with :func:`window_slack`): the one test of
    the detector's window, the warm-up, the default minimum pod age and the quarantine's delay."""
    return elapsed_s >= window_s - window_slack(window_s)


@dataclass(frozen=True, slots=True)
class Sample:
    """One scrape of one engine series.

    ``t``: seconds on a monotonic clock. ``running``/``waiting``: gauge values (requests). ``progress``: one
    value per progress signal of the profile, always in the same order (counters as cumulative totals, gauges
    as read). ``paused``: the profile's paused gauge (> 0: sleeping or paused on purpose). Any value may be
    ``None`` (scrape failed or metric missing); NaN, infinities and negative values are treated as ``None``.
    """

    t: float
    running: float | None
    progress: tuple[float | None, ...] = ()
    waiting: float | None = None
    paused: float | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the detector concludes after one sample.

    ``state``: idle | progressing | suspect | stalled | unknown (the property ``stalled``: ``state == "stalled"``).
    ``stalled_for_s``: seconds since the stall clock started (0 unless suspect/stalled). ``reason``: one
    human sentence with the evidence, for log lines (Event messages are composed from the structured fields:
    :func:`watchdog.core.events.stall_message`). ``t``: the sample's time; ``running``: the running gauge of the
    latest known sample (None when unknown); ``busy_samples``: known busy samples inside the clock. Set on
    suspect and stalled verdicts only: ``waiting`` (the waiting gauge, None when not exported), ``frozen``
    (every known progress signal's value by name, in the profile's order) and ``window_s`` (the window it is
    judged by: the completion-only window when that applied).
    """

    state: EngineState
    stalled_for_s: float
    reason: str
    t: float | None = None
    running: float | None = None
    busy_samples: int = 0
    waiting: float | None = None
    frozen: tuple[tuple[str, float], ...] = ()
    window_s: float = 0.0

    @property
    def stalled(self) -> bool:
        return self.state == "stalled"


def _fmt(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


@lru_cache(maxsize=64)
def _gauges(signals: tuple[Selector, ...]) -> tuple[frozenset[int], tuple[str, ...]]:
    """The indexes of the gauge signals and the signals' names (shared by every engine series of a profile)."""
    return frozenset(i for i, s in enumerate(signals) if s.kind == "gauge"), tuple(map(str, signals))


class DetectorState:
    """The incremental detector for one engine series: feed samples in time order to :meth:`observe`.

    ``window_s``: seconds (> 0). ``min_samples``: known busy samples needed inside the window (>= 1).
    ``count_waiting``: treat waiting requests as busy too. ``signals``: the profile's progress selectors
    (``Profile.progress``), for the names in the verdict's reason and to tell a counter reset from a gauge that
    fell. ``completion_window_s``: the window for busy samples whose only known progress signals are
    completion-only (rule 8); ``None``: such samples are unknown. Raises ``ValueError`` on a bad parameter.
    """

    __slots__ = ("_baseline", "_busy_samples", "_clock_start", "_gauges", "_last_t", "_names", "completion_window_s",
                 "count_waiting", "min_samples", "signals", "window_s")  # one per engine series: thousands

    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        *,
        min_samples: int = DEFAULT_MIN_SAMPLES,
        count_waiting: bool = False,
        signals: tuple[Selector, ...] = (),
        completion_window_s: float | None = None,
    ) -> None:
        if not (isinstance(window_s, int | float) and math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be a positive number of seconds, got {window_s!r}")
        if not isinstance(min_samples, int) or min_samples < 1:
            raise ValueError(f"min_samples must be an integer >= 1, got {min_samples!r}")
        self.window_s = float(window_s)
        self.min_samples = min_samples
        self.count_waiting = count_waiting
        if completion_window_s is not None and not completion_window_s > 0:
            raise ValueError(f"completion_window_s must be None or > 0 seconds, got {completion_window_s!r}")
        self.signals = signals
        self.completion_window_s = completion_window_s
        self._gauges, self._names = _gauges(signals)
        self._reset()

    def _reset(self) -> None:
        self._last_t: float | None = None
        self._baseline: list[float | None] = []  # per progress signal its last known value (None: never)
        self._clock_start: float | None = None  # None: not busy (idle) or nothing seen yet
        self._busy_samples = 0

    def observe(self, sample: Sample) -> Verdict:
        """Take the next sample of this engine series and return the verdict after it."""
        running = known(sample.running)
        values = known_all(sample.progress)
        missing = missing_among(running, values)
        waiting = known(sample.waiting)
        busy = 0.0 if running is None else running + ((waiting or 0.0) if self.count_waiting else 0.0)  # load()
        if missing is not None and (running is None or busy > 0):
            return Verdict("unknown", 0.0, f"no evidence: {missing} missing or invalid in this scrape",
                           t=sample.t)

        if self._last_t is not None and sample.t < self._last_t:
            self._reset()  # rule 6: time went backwards; start over from this sample
        first_ever = self._last_t is None
        self._last_t = sample.t

        progressed, reset = self._update_baselines(values)
        if is_paused(sample):
            self._clock_start = None
            self._busy_samples = 0
            return Verdict("paused", 0.0, f"paused: the engine reports it is paused or sleeping "
                           f"({_fmt(running)} running)", t=sample.t, running=running)
        if busy <= 0:
            self._clock_start = None
            self._busy_samples = 0
            return Verdict("idle", 0.0, "idle: no requests running", t=sample.t, running=running)

        window_s = self.window_s
        if not progressed and not live_evidence(sample, self.signals):
            if self.completion_window_s is None:
                return Verdict("unknown", 0.0, f"no evidence: {_fmt(running)} running and only "
                               "completion-only progress signals (they move when a request finishes; see the "
                               "setting completionOnlyWindowSeconds)", t=sample.t, running=running)
            window_s = max(window_s, self.completion_window_s)
        if progressed or self._clock_start is None:
            self._clock_start = sample.t
            self._busy_samples = 1
        else:
            self._busy_samples += 1
        if progressed:
            return Verdict("progressing", 0.0, _progressing(running, progressed, reset), t=sample.t, running=running,
                           busy_samples=1)

        assert self._clock_start is not None
        stalled_for = sample.t - self._clock_start
        frozen = tuple((signal_name(self.signals, i), v) for i, v in enumerate(values) if v is not None)
        evidence = (
            f"{_fmt(running)} requests running"
            + (f" ({_fmt(waiting)} waiting)" if waiting is not None else "")
            + f", progress signals unchanged ({', '.join(f'{name}={_fmt(v)}' for name, v in frozen)}) for "
            f"{stalled_for:.0f} s over {self._busy_samples} busy samples (window {window_s:.0f} s)"
        )
        stalled = window_reached(stalled_for, window_s) and self._busy_samples >= self.min_samples
        why = "first busy sample, no progress seen yet" if first_ever else "busy without progress"
        return Verdict(
            "stalled" if stalled else "suspect", stalled_for,
            f"stalled: {evidence}" if stalled else f"suspect ({why}): {evidence}",
            t=sample.t, running=running, busy_samples=self._busy_samples,
            waiting=waiting, frozen=frozen, window_s=window_s,
        )

    def _update_baselines(self, values: list[float | None]) -> tuple[str, bool]:
        """Compare known values with their last known value; return (first signal that moved or "", was_reset)."""
        baseline = self._baseline
        if baseline == values:  # nothing moved and nothing new: the common case of a stalled or idle engine
            return "", False
        count = len(values)
        if len(baseline) < count:
            baseline.extend([None] * (count - len(baseline)))
        moved = [i for i, (value, previous) in enumerate(zip(values, baseline, strict=False))
                 if value != previous and value is not None and previous is not None]
        if None in values:
            pairs = zip(values, baseline, strict=False)
            self._baseline = [previous if value is None else value for value, previous in pairs] + baseline[count:]
        else:  # every value known (the common case): they are the baseline
            self._baseline = values if len(baseline) == count else values + baseline[count:]
        if not moved:
            return "", False
        gauges = self._gauges
        reset = any([values[i] < baseline[i] for i in moved if i not in gauges])  # type: ignore[operator]
        first = moved[0]
        return self._names[first] if first < len(self._names) else signal_name(self.signals, first), reset


_REASONS: dict[tuple[float, str, bool], str] = {}  # a progressing verdict's reason, shared by every series


def _progressing(running: float | None, progressed: str, reset: bool) -> str:
    """The reason of a progressing verdict (made once per running count and signal: thousands of engine series
    progress every cycle)."""
    if not running:  # 0 or -0 (waiting counted), written apart; None: not busy
        return _progressing_reason(running, progressed, reset)
    reason = _REASONS.get((running, progressed, reset))
    if reason is None:
        if len(_REASONS) >= 1024:
            _REASONS.clear()
        reason = _REASONS[(running, progressed, reset)] = _progressing_reason(running, progressed, reset)
    return reason


def _progressing_reason(running: float | None, progressed: str, reset: bool) -> str:
    what = "a counter reset (engine restart)" if reset else f"{progressed} moving"
    return f"progressing: {_fmt(running)} running, {what}"


def detect(
    samples: Iterable[Sample],
    window_s: float = DEFAULT_WINDOW_S,
    *,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    count_waiting: bool = False,
    signals: tuple[Selector, ...] = (),
    completion_window_s: float | None = None,
) -> Verdict:
    """The verdict after the last of ``samples`` (time-ordered, one engine series).

    Exactly the fold of :meth:`DetectorState.observe` over ``samples``; ``unknown`` for no samples at all.
    Raises ``ValueError`` on a bad ``window_s``/``min_samples``.
    """
    state = DetectorState(window_s, min_samples=min_samples, count_waiting=count_waiting, signals=signals,
                          completion_window_s=completion_window_s)
    verdict = Verdict("unknown", 0.0, "no evidence: no samples")
    for sample in samples:
        verdict = state.observe(sample)
    return verdict
