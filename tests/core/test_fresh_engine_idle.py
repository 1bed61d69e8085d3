"""A known running gauge of 0 with every progress signal missing is idle, not unknown (issue 31 item 3): a fresh
SGLang server has no labelled counters before its first request (seen in SGLang 0.5.23's own metric code:
tests/fixtures/engines/sglang-fresh-server). Unknown never becomes evidence: busy with every progress signal
missing, or running missing, stays unknown and never starts or advances a stall clock."""

from __future__ import annotations

import pytest

from watchdog.core.detector import DetectorState, Sample
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import get_profile

SGLANG = get_profile("sglang")
NONE = (None,) * len(SGLANG.progress)
FRESH = ('sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0\n'
         'sglang:num_queue_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0\n')


def detector(**kwargs: object) -> DetectorState:
    return DetectorState(30.0, min_samples=2, signals=SGLANG.progress, **kwargs)  # type: ignore[arg-type]


def test_a_fresh_sglang_server_with_running_0_and_no_counters_yet_is_idle() -> None:
    (series,) = parse_exposition(FRESH, SGLANG).series
    assert (series.running, series.progress) == (0.0, NONE)
    verdict = detector().observe(Sample(0.0, series.running, series.progress, series.waiting, series.paused))
    assert (verdict.state, verdict.reason) == ("idle", "idle: no requests running")


@pytest.mark.parametrize("completion_window_s", [None, 600.0])
def test_busy_with_every_progress_signal_missing_stays_unknown_and_is_never_evidence(
        completion_window_s: float | None) -> None:
    d = detector(completion_window_s=completion_window_s)
    states = [d.observe(Sample(float(t), 3.0, NONE)).state for t in range(0, 120, 10)]
    assert set(states) == {"unknown"}
    # the unknowns started no clock: the first sample with a signal is the first busy one, not a stall
    assert d.observe(Sample(120.0, 3.0, (5.0, *NONE[1:]))).state == "suspect"
    assert d.observe(Sample(125.0, 3.0, (5.0, *NONE[1:]))).stalled_for_s == 5.0


def test_running_missing_stays_unknown_and_waiting_counts_only_with_count_waiting() -> None:
    assert detector().observe(Sample(0.0, None, NONE)).state == "unknown"
    assert detector().observe(Sample(0.0, 0.0, NONE, waiting=4.0)).state == "idle"
    assert detector(count_waiting=True).observe(Sample(0.0, 0.0, NONE, waiting=4.0)).state == "unknown"


def test_idle_without_counters_ends_a_stall_clock_as_any_idle_sample() -> None:
    d = detector()
    for t in (0.0, 10.0, 20.0):
        d.observe(Sample(t, 2.0, (7.0, *NONE[1:])))
    assert d.observe(Sample(25.0, 0.0, NONE)).state == "idle"
    assert d.observe(Sample(40.0, 2.0, (7.0, *NONE[1:]))).state == "suspect"  # a new clock from 40, not 0
