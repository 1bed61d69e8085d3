"""The detector's rules (watchdog/core/detector.py docstring), one test class per rule.

Each rule was broken once in the source to watch its test fail (see the commit message of the detector);
the long-prefill falsification is kept as a test below.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core import detector as core_detector
from watchdog.core import detector as detector
from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.profiles import Selector, get_profile

#: The three counters most tests use, in Sample.progress order.
SIGNALS = (Selector("generation_tokens"), Selector("prompt_tokens"), Selector("heartbeat"))


def Sample(t: float, running: float | None, generation_tokens: float | None = None,
           prompt_tokens: float | None = None, waiting: float | None = None, heartbeat: float | None = None,
           paused: float | None = None) -> core_detector.Sample:
    """A detector sample with the progress signals of :data:`SIGNALS`."""
    return core_detector.Sample(t, running, (generation_tokens, prompt_tokens, heartbeat), waiting, paused)


def detect(samples: list[core_detector.Sample], *args: object, **kw: object) -> Verdict:
    """:func:`watchdog.core.detector.detect` naming the progress signals of :data:`SIGNALS`."""
    kw.setdefault("signals", SIGNALS)
    return core_detector.detect(samples, *args, **kw)  # type: ignore[arg-type]


STEP = 15.0


def busy(t: float, gen: float, prompt: float, running: float = 21, **kw: float | None) -> core_detector.Sample:
    return Sample(t=t, running=running, generation_tokens=gen, prompt_tokens=prompt, **kw)


def frozen(n: int, start: float = 0.0, running: float = 21, gen: float = 500.0,
           prompt: float = 900.0) -> list[core_detector.Sample]:
    return [busy(start + i * STEP, gen, prompt, running) for i in range(n)]


def verdicts(samples: list[core_detector.Sample], **kw: object) -> list[Verdict]:
    kw.setdefault("signals", SIGNALS)
    state = DetectorState(**kw)  # type: ignore[arg-type]
    return [state.observe(s) for s in samples]


class TestBusyAndIdle:
    def test_idle_is_never_stalled_even_with_frozen_counters(self) -> None:
        samples = [Sample(t=i * STEP, running=0, generation_tokens=5, prompt_tokens=5) for i in range(100)]
        v = detect(samples)
        assert (v.state, v.stalled, v.stalled_for_s) == ("idle", False, 0.0)

    def test_idle_sample_ends_a_running_clock(self) -> None:
        samples = frozen(8) + [Sample(t=8 * STEP, running=0, generation_tokens=500, prompt_tokens=900)]
        samples += frozen(8, start=9 * STEP)  # busy again, same frozen counters
        vs = verdicts(samples)
        assert vs[7].state == "suspect" and vs[7].stalled_for_s == 105.0
        assert vs[8].state == "idle"
        # The clock restarted at the first busy sample after idle (t=135): 105 s later, still suspect.
        assert vs[-1].state == "suspect"
        assert vs[-1].stalled_for_s == 105.0

    def test_waiting_alone_is_busy_only_with_count_waiting(self) -> None:
        samples = [Sample(t=i * STEP, running=0, waiting=4, generation_tokens=1, prompt_tokens=1) for i in range(10)]
        assert detect(samples).state == "idle"
        v = detect(samples, count_waiting=True)
        assert v.stalled and v.stalled_for_s == 135.0


class TestProgress:
    @pytest.mark.parametrize("field", ["generation_tokens", "prompt_tokens", "heartbeat"])
    def test_any_counter_rising_is_progress(self, field: str) -> None:
        samples = []
        for i in range(12):
            values = {"generation_tokens": 10.0, "prompt_tokens": 10.0, "heartbeat": 10.0}
            values[field] = 10.0 + i
            samples.append(Sample(t=i * STEP, running=3, **values))  # type: ignore[arg-type]
        v = detect(samples)
        assert v.state == "progressing" and not v.stalled

    def test_counter_going_down_is_a_reset_and_counts_as_progress(self) -> None:
        samples = frozen(8) + [busy(8 * STEP, gen=3, prompt=4)] + [busy((9 + i) * STEP, 3, 4) for i in range(4)]
        vs = verdicts(samples)
        assert vs[7].state == "suspect" and vs[7].stalled_for_s == 105.0
        assert vs[8].state == "progressing" and "reset" in vs[8].reason
        # Clock re-started at the reset (t=120): 60 s later, not yet stalled.
        assert vs[-1].state == "suspect" and vs[-1].stalled_for_s == 60.0


class TestClockStart:
    def test_long_idle_then_busy_and_frozen_is_not_stalled_at_once(self) -> None:
        # Idle for an hour with counters last moved an hour ago, then busy and frozen.
        idle = [Sample(t=i * 60.0, running=0, generation_tokens=7, prompt_tokens=7) for i in range(61)]
        start = 3660.0
        wedge = [busy(start + i * STEP, gen=7, prompt=7) for i in range(9)]
        vs = verdicts(idle + wedge)
        first_busy = vs[len(idle)]
        assert first_busy.state == "suspect" and first_busy.stalled_for_s == 0.0
        assert vs[-2].state == "suspect" and vs[-2].stalled_for_s == 105.0
        assert vs[-1].state == "stalled" and vs[-1].stalled_for_s == 120.0

    def test_clock_restarts_at_latest_progress(self) -> None:
        samples = [busy(i * STEP, gen=100 + i, prompt=0) for i in range(5)]  # progress up to t=60
        samples += [busy((5 + i) * STEP, gen=104, prompt=0) for i in range(9)]
        v = detect(samples)
        assert v.stalled_for_s == samples[-1].t - 60.0 == 135.0
        assert v.stalled

    def test_first_sample_ever_starts_the_clock(self) -> None:
        vs = verdicts(frozen(9))
        assert [v.stalled_for_s for v in vs] == [i * STEP for i in range(9)]
        assert vs[0].state == "suspect"


class TestStalledThreshold:
    def test_stalled_exactly_at_window_not_before(self) -> None:
        vs = verdicts(frozen(9))  # t = 0 .. 120
        assert vs[7].state == "suspect"  # t=105
        assert vs[8].state == "stalled" and vs[8].stalled_for_s == 120.0  # >=, not >
        assert detect(frozen(9), window_s=120.0).stalled
        # the slack (1% of the window, at most 1 s): 120 s of no progress is the window up to 121 s, not beyond
        assert detect(frozen(9), window_s=121.0).stalled
        assert not detect(frozen(9), window_s=121.001).stalled

    @pytest.mark.parametrize("window_s, slack", [(15.0, 0.15), (60.0, 0.6), (100.0, 1.0), (120.0, 1.0),
                                                 (600.0, 1.0)])
    def test_a_scheduled_sample_a_little_early_is_still_the_window(self, window_s: float, slack: float) -> None:
        # Samples every window/4 s; the last one arrives early by a hair less, or a hair more, than the slack.
        assert detector.window_slack(window_s) == pytest.approx(slack)
        step = window_s / 4
        early = [busy(i * step, 5, 5) for i in range(4)]
        assert detect([*early, busy(window_s - slack + 1e-6, 5, 5)], window_s=window_s).stalled
        assert detect([*early, busy(window_s - slack - 1e-3, 5, 5)], window_s=window_s).state == "suspect"

    def test_the_slack_never_stands_in_for_min_samples(self) -> None:
        two = [busy(0, 5, 5), busy(119.5, 5, 5)]  # within the slack of 120 s, but 2 samples < 3
        assert detect(two, min_samples=3).state == "suspect"
        assert detect(two, min_samples=2).stalled

    def test_min_samples_needed_inside_the_clock(self) -> None:
        # Only two samples, 200 s apart: time is past the window but evidence is thin.
        two = [busy(0, 5, 5), busy(200, 5, 5)]
        assert detect(two, min_samples=3).state == "suspect"
        assert detect(two, min_samples=2).state == "stalled"
        three = [busy(0, 5, 5), busy(100, 5, 5), busy(200, 5, 5)]
        assert detect(three, min_samples=3).stalled

    def test_stalled_verdict_reason_carries_the_evidence(self) -> None:
        v = detect(frozen(10, gen=1274417, prompt=3456972))
        assert v.stalled
        for text in ("21 requests running", "generation_tokens=1274417", "prompt_tokens=3456972", "135 s",
                     "window 120 s", "10 busy samples"):
            assert text in v.reason

    @pytest.mark.parametrize("window_s, min_samples", [(0, 3), (-1, 3), (math.nan, 3), (120, 0)])
    def test_bad_parameters_raise(self, window_s: float, min_samples: int) -> None:
        with pytest.raises(ValueError):
            DetectorState(window_s, min_samples=min_samples)


class TestUnknown:
    @pytest.mark.parametrize(
        "sample",
        [
            Sample(t=0, running=None, generation_tokens=1, prompt_tokens=1),
            Sample(t=0, running=math.nan, generation_tokens=1, prompt_tokens=1),
            Sample(t=0, running=21, generation_tokens=None, prompt_tokens=math.nan, heartbeat=None),
            Sample(t=0, running=-1.0, generation_tokens=1, prompt_tokens=1),
        ],
    )
    def test_unknown_latest_sample_gives_unknown(self, sample: Sample) -> None:
        history = frozen(20, start=-20 * STEP)
        v = detect([*history, sample])
        assert v.state == "unknown" and not v.stalled and v.stalled_for_s == 0.0

    def test_unknowns_alone_never_start_a_clock(self) -> None:
        unknowns = [Sample(t=i * STEP, running=None, generation_tokens=None, prompt_tokens=None) for i in range(50)]
        vs = verdicts(unknowns + [busy(50 * STEP, 5, 5)])
        assert all(v.state == "unknown" for v in vs[:-1])
        assert vs[-1].state == "suspect" and vs[-1].stalled_for_s == 0.0

    def test_unknowns_do_not_count_towards_min_samples(self) -> None:
        gap = [Sample(t=i * STEP, running=21, generation_tokens=None, prompt_tokens=None) for i in range(1, 20)]
        samples = [busy(0, 5, 5), *gap, busy(20 * STEP, 5, 5)]
        v = detect(samples)
        assert v.state == "suspect" and v.busy_samples == 2 and v.stalled_for_s == 300.0

    def test_gap_keeps_the_clock_running(self) -> None:
        gap = [Sample(t=i * STEP, running=None, generation_tokens=None, prompt_tokens=None) for i in range(3, 9)]
        samples = frozen(3) + gap + [busy(9 * STEP, 500, 900)]
        v = detect(samples)
        assert v.stalled and v.stalled_for_s == 135.0 and v.busy_samples == 4

    def test_counter_missing_in_one_scrape_does_not_fake_progress(self) -> None:
        # generation missing in one sample, then back with the same value: no progress.
        samples = frozen(4) + [busy(4 * STEP, None, 900)] + frozen(5, start=5 * STEP)  # type: ignore[arg-type]
        assert detect(samples).stalled

    def test_counter_back_with_a_new_value_after_a_missing_scrape_is_progress(self) -> None:
        # the baseline is the last KNOWN value: generation 500, missing, then 501 moved (a gap never erases it)
        samples = frozen(4) + [busy(4 * STEP, None, 900), busy(5 * STEP, 501, 900)]  # type: ignore[arg-type]
        v = verdicts(samples)
        assert [x.state for x in v[-2:]] == ["suspect", "progressing"]
        assert "generation_tokens moving" in v[-1].reason


class TestTimeGoingBackwards:
    def test_time_going_backwards_rebaselines(self) -> None:
        samples = frozen(8) + frozen(8, start=-1000.0)
        vs = verdicts(samples)
        assert vs[8].state == "suspect" and vs[8].stalled_for_s == 0.0
        assert vs[-1].state == "suspect" and vs[-1].stalled_for_s == 105.0

    def test_time_going_backwards_can_never_stall(self) -> None:
        samples = frozen(8) + [busy(50.0, 500, 900)]
        assert not detect(samples).stalled


class TestSeedCases:
    def test_steady_progress_never_fails(self) -> None:
        samples = [busy(i * STEP, gen=1000 + 40 * i, prompt=500 + 90 * i) for i in range(200)]
        assert all(v.state == "progressing" for v in verdicts(samples)[1:])

    def test_frozen_counters_fail_only_after_the_window(self) -> None:
        vs = verdicts(frozen(20))
        assert [v.stalled for v in vs] == [v.t is not None and v.t >= 120.0 for v in vs]

    @staticmethod
    def v1_long_prefill(kv_cache: bool = True) -> list[core_detector.Sample]:
        """vLLM V1, one 100k-token prompt chunk-prefilled alone: no step produces an output, so no token counter
        and no step-histogram sample moves; the KV-cache usage gauge grows by one chunk per step."""
        vllm = get_profile("vllm")
        names = vllm.progress_names()
        out = []
        for i in range(40):
            values = {"vllm:generation_tokens_total": 100.0, "vllm:prompt_tokens_total": 2000.0,
                      "vllm:iteration_tokens_total_count": 30.0,
                      "vllm:kv_cache_usage_perc": 0.01 + 0.02 * i if kv_cache else None}
            out.append(core_detector.Sample(i * STEP, 1.0, tuple(values.get(n) for n in names), 0.0))
        return out

    def test_long_prefill_never_fails(self) -> None:
        vs = verdicts(self.v1_long_prefill(), signals=get_profile("vllm").progress)
        assert [v.state for v in vs[1:]] == ["progressing"] * 39
        assert vs[-1].reason == "progressing: 1 running, vllm:kv_cache_usage_perc moving"

    def test_falsification_without_the_kv_cache_gauge_the_prefill_would_stall(self) -> None:
        v = detect(self.v1_long_prefill(kv_cache=False), signals=get_profile("vllm").progress)
        assert v.state == "stalled"
        assert "vllm:prompt_tokens_total=2000" in v.reason and "kv_cache" not in v.reason

    def test_heartbeat_alone_keeps_an_engine_alive(self) -> None:
        samples = [busy(i * STEP, gen=100, prompt=2000, running=1, heartbeat=30 + i) for i in range(40)]
        assert detect(samples, signals=SIGNALS).state == "progressing"

    def test_a_gauge_that_falls_is_progress_but_not_a_reset(self) -> None:
        gauge = (Selector("kv", kind="gauge"),)
        samples = [core_detector.Sample(i * STEP, 2.0, (0.5 if i < 3 else 0.25,)) for i in range(5)]
        vs = verdicts(samples, signals=gauge)
        assert vs[3].state == "progressing" and vs[3].reason == "progressing: 2 running, kv moving"


class TestPaused:
    def test_a_sleeping_engine_with_requests_running_is_never_stalled(self) -> None:
        samples = frozen(10) + [Sample(t=(10 + i) * STEP, running=21, generation_tokens=7, prompt_tokens=7,
                                       paused=1.0) for i in range(20)]
        vs = verdicts(samples)
        assert vs[9].stalled
        assert all(v.state == "paused" and not v.stalled for v in vs[10:])

    def test_waking_up_starts_a_fresh_clock(self) -> None:
        samples = [Sample(t=i * STEP, running=21, generation_tokens=7, prompt_tokens=7, paused=1.0)
                   for i in range(10)]
        samples += [Sample(t=(10 + i) * STEP, running=21, generation_tokens=7, prompt_tokens=7, paused=0.0)
                    for i in range(10)]
        vs = verdicts(samples)
        assert vs[10].state == "suspect" and vs[10].stalled_for_s == 0.0
        assert vs[18].stalled_for_s == 8 * STEP

    @pytest.mark.parametrize("value", [None, math.nan, -1.0, 0.0])
    def test_an_unknown_or_zero_paused_gauge_is_not_paused(self, value: float | None) -> None:
        samples = [Sample(t=i * STEP, running=21, generation_tokens=7, prompt_tokens=7, paused=value)
                   for i in range(20)]
        assert detect(samples).stalled


# ---- property tests ---------------------------------------------------------------------------------------

maybe = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False), st.just(math.nan))
samples_strategy = st.lists(
    st.builds(
        Sample,
        t=st.floats(min_value=0, max_value=1e4, allow_nan=False),
        running=st.one_of(maybe, st.integers(0, 50).map(float)),
        generation_tokens=maybe,
        prompt_tokens=maybe,
        waiting=maybe,
        heartbeat=maybe,
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.1, max_value=100), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=50))
def test_property_strictly_increasing_counters_never_stall(steps: list[float], running: int) -> None:
    t, gen = 0.0, 0.0
    samples = []
    for dt in steps:
        t += dt
        gen += dt
        samples.append(Sample(t=t, running=float(running), generation_tokens=gen, prompt_tokens=None))
    vs = verdicts(samples, window_s=1.0, min_samples=1)
    assert not any(v.stalled for v in vs)


@settings(max_examples=300, deadline=None)
@given(samples_strategy)
def test_property_running_zero_never_stalls(samples: list[core_detector.Sample]) -> None:
    idle = [core_detector.Sample(s.t, 0.0, s.progress, s.waiting) for s in samples]
    assert not any(v.stalled for v in verdicts(sorted(idle, key=lambda s: s.t), window_s=1.0, min_samples=1))


@settings(max_examples=300, deadline=None)
@given(samples_strategy, st.floats(min_value=1, max_value=500), st.integers(1, 5), st.booleans())
def test_property_detect_is_the_incremental_fold(
    samples: list[core_detector.Sample], window_s: float, min_samples: int, count_waiting: bool
) -> None:
    state = DetectorState(window_s, min_samples=min_samples, count_waiting=count_waiting, signals=SIGNALS)
    last = Verdict("unknown", 0.0, "no evidence: no samples")
    for s in samples:
        last = state.observe(s)
    assert detect(samples, window_s, min_samples=min_samples, count_waiting=count_waiting) == last


@settings(max_examples=300, deadline=None)
@given(samples_strategy)
def test_property_verdict_is_consistent(samples: list[core_detector.Sample]) -> None:
    for v in verdicts(samples, window_s=30.0, min_samples=2):
        assert v.stalled == (v.state == "stalled")
        assert v.stalled_for_s >= 0.0
        if v.state not in ("suspect", "stalled"):
            assert v.stalled_for_s == 0.0
        if v.stalled:
            # the window less its slack (rule 4: 1% of 30 s), never less; hypothesis found 29.75 s
            assert v.stalled_for_s >= 29.7 and v.busy_samples >= 2


class TestCompletionOnly:
    """Rule 8: counters that move only when a request finishes are no evidence alone."""

    SIGNALS = (Selector("decode_steps_total"), Selector("generation_tokens_total", completion_only=True))

    def run(self, values: list[tuple[float | None, float | None]], **kw: object) -> list[Verdict]:
        samples = [core_detector.Sample(i * STEP, 1.0, v) for i, v in enumerate(values)]
        return verdicts(samples, signals=self.SIGNALS, **kw)

    def test_completion_only_values_alone_are_unknown_and_never_stall(self) -> None:
        vs = self.run([(None, 500.0)] * 40)
        assert {v.state for v in vs} == {"unknown"} and not any(v.stalled for v in vs)
        assert "only completion-only progress signals" in vs[-1].reason

    def test_with_a_completion_window_they_are_judged_on_it(self) -> None:
        vs = self.run([(None, 500.0)] * 42, completion_window_s=600.0)
        assert vs[40].state == "stalled" and vs[40].stalled_for_s == 600.0 and "window 600 s" in vs[40].reason
        assert vs[39].state == "suspect"  # 585 s < 600 s: the normal 120 s window does not apply

    def test_a_completion_only_counter_that_moves_is_still_progress(self) -> None:
        vs = self.run([(None, 500.0 + (i // 5)) for i in range(40)])
        assert vs[5].state == "progressing" and vs[5].reason == "progressing: 1 running, generation_tokens_total moving"

    def test_a_live_signal_makes_the_normal_window_apply(self) -> None:
        vs = self.run([(7.0, 500.0)] * 10)
        assert vs[-1].state == "stalled" and "window 120 s" in vs[-1].reason

    def test_bad_completion_window(self) -> None:
        with pytest.raises(ValueError, match="completion_window_s"):
            DetectorState(120.0, completion_window_s=0.0)
