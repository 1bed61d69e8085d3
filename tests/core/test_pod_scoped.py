"""Pod-scoped series (a profile signal whose label set carries none of the profile's engine labels) apply to every
engine series of their body, in both sources (issue 27 item 4, issue 31 item 3).

vLLM prints ``vllm:rl_weight_update_operations_in_flight{operation}`` and ``vllm:sleep_mode_operations_in_flight
{operation}`` with the ``operation`` label only. When such a label set was "no engine" and dropped, an engine whose
weights were being updated for longer than the window was judged stalled (a wrong deletion): with the update gauge
at 1 from t=21 to 44 s, stalled from t=30 (window 10 s). The rule lives in ONE place,
:func:`watchdog.core.parsing.engine_series`; the Prometheus source goes through it too."""

from __future__ import annotations

import math

import pytest

from tests.promfake import FakePrometheus, pod_reading
from watchdog.core.detector import DetectorState, Sample
from watchdog.core.parsing import EngineSnapshot, parse_exposition
from watchdog.core.profiles import custom_profile, get_profile

VLLM = get_profile("vllm")
PAUSES = ["vllm:rl_weight_update_operations_in_flight", "vllm:sleep_mode_operations_in_flight"]
TARGET = {"namespace": "n", "pod": "p", "job": "vllm", "instance": "10.0.0.1:8000"}
UPDATE = range(21, 45)  # the weight update (or sleep) is under way from t=21 to t=44 s


def body(t: int, pause: str) -> str:
    """One scrape at ``t`` of a vLLM server with two data-parallel engines, 4 requests running on each: tokens
    rise, except while the pod-scoped ``pause`` gauge reads 1 (absent before t=10, 0 outside the update)."""
    tokens = 10 * (min(t, 20) + max(0, t - 44))
    lines = []
    for engine in ("0", "1"):
        labels = f'engine="{engine}",model_name="m"'
        lines += [f"vllm:num_requests_running{{{labels}}} 4", f"vllm:num_requests_waiting{{{labels}}} 0",
                  f"vllm:generation_tokens_total{{{labels}}} {tokens}",
                  f"vllm:kv_cache_usage_perc{{{labels}}} 0.5",
                  f'vllm:engine_sleep_state{{{labels},sleep_state="awake"}} 1']
    if t >= 10:
        lines.append(f'{pause}{{operation="{"update" if "rl_" in pause else "sleep"}"}} {int(t in UPDATE)}')
    return "\n".join(lines) + "\n"


def judge(readings: list[tuple[float, tuple[EngineSnapshot, ...]]]) -> dict[str, list[tuple[float, str]]]:
    """Each engine series' verdicts (t, state) over ``readings``, window 10 s, 3 samples."""
    detectors: dict[str, DetectorState] = {}
    out: dict[str, list[tuple[float, str]]] = {}
    for t, series in readings:
        for s in series:
            detector = detectors.setdefault(s.key, DetectorState(10.0, min_samples=3, signals=VLLM.progress))
            verdict = detector.observe(Sample(t, s.running, s.progress, s.waiting, s.paused))
            out.setdefault(s.key, []).append((t, verdict.state))
    return out


def assert_paused_never_stalled(verdicts: dict[str, list[tuple[float, str]]], times: range) -> None:
    assert set(verdicts) == {'engine="0",model_name="m"', 'engine="1",model_name="m"'}  # no engine of its own
    for key, states in verdicts.items():
        assert all(state != "stalled" for _, state in states), (key, [s for s in states if s[1] == "stalled"])
        assert [t for t, state in states if state == "paused"] == [float(t) for t in times if t in UPDATE], key
        assert dict(states)[50.0] == "progressing", key


# ---- the scrape source: one body -> engine series -> detector --------------------------------------------------

@pytest.mark.parametrize("pause", PAUSES)
def test_a_pod_scoped_paused_gauge_pauses_every_engine_of_the_body(pause: str) -> None:
    during, after, before = (parse_exposition(body(t, pause), VLLM) for t in (30, 50, 5))
    assert [(s.key, s.paused) for s in during.series] == [('engine="0",model_name="m"', 1.0),
                                                          ('engine="1",model_name="m"', 1.0)]
    assert [s.paused for s in after.series] == [0.0, 0.0]  # 0 in flight; awake 1: not paused
    assert [s.paused for s in before.series] == [0.0, 0.0]  # the awake gauges alone
    assert pause in during.found_families


@pytest.mark.parametrize("pause", PAUSES)
def test_an_engine_paused_longer_than_the_window_by_a_pod_scoped_gauge_is_paused_never_stalled(pause: str) -> None:
    times = range(0, 61)
    verdicts = judge([(float(t), parse_exposition(body(t, pause), VLLM).series) for t in times])
    assert_paused_never_stalled(verdicts, times)


def test_a_pod_scoped_awake_gauge_reading_0_puts_every_engine_to_sleep() -> None:
    text = body(30, PAUSES[0]).replace(PAUSES[0] + '{operation="update"} 1',
                                       'vllm:engine_sleep_state{sleep_state="awake"} 0')
    assert [s.paused for s in parse_exposition(text, VLLM).series] == [1.0, 1.0]


def test_an_engines_own_pause_is_kept_and_a_pod_scoped_zero_or_nan_never_hides_it() -> None:
    text = ('vllm:num_requests_running{engine="0"} 4\nvllm:num_requests_running{engine="1"} 4\n'
            'vllm:sleep_mode_operations_in_flight{engine="1",operation="sleep"} 1\n'
            'vllm:sleep_mode_operations_in_flight{operation="sleep"} %s\n')
    (engine0, engine1) = parse_exposition(text % "0", VLLM).series
    assert (engine0.paused, engine1.paused) == (0.0, 1.0)
    (engine0, engine1) = parse_exposition(text % "NaN", VLLM).series
    assert math.isnan(engine0.paused or 0.0) and engine1.paused == 1.0  # NaN: unknown, as an engine's own NaN


def test_an_engines_load_is_its_own_a_pod_scoped_running_or_waiting_is_never_spread() -> None:
    # A pod-wide waiting count would make an idle engine busy: evidence it does not have.
    text = ('vllm:num_requests_running{engine="0"} 0\nvllm:num_requests_running{engine="1"} 0\n'
            "vllm:num_requests_waiting 7\n"
            'vllm:num_requests_waiting{engine="1"} 5\n'
            'vllm:num_requests_waiting_by_reason{reason="deferred"} 3\n')
    (engine0, engine1) = parse_exposition(text, VLLM).series
    assert (engine0.running, engine0.waiting) == (0.0, None)
    # the waiting an engine ignores may come from the pod: it only ever makes an engine less busy
    assert (engine1.running, engine1.waiting) == (0.0, 2.0)


COUNTER = custom_profile("c", {"progress": ["vllm:generation_tokens_total", "pod_steps_total"]})
GAUGE = custom_profile("g", {"progress": ["pod_usage_perc"]})


def test_a_pod_scoped_progress_counter_is_a_progress_signal_of_every_engine_its_own_value_first() -> None:
    text = ('vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 2\n'
            'vllm:generation_tokens_total{engine="0"} 10\npod_steps_total 100\npod_steps_total{engine="1"} 7\n')
    assert [s.progress for s in parse_exposition(text, COUNTER).series] == [(10.0, 100.0), (None, 7.0)]


def test_a_pod_scoped_counter_flat_is_a_stall_of_each_engine_and_moving_is_progress_of_each() -> None:
    def at(t: int, steps: int) -> tuple[float, tuple[EngineSnapshot, ...]]:
        text = ('vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 2\n'
                f"pod_steps_total {steps}\n")
        return float(t), parse_exposition(text, COUNTER).series

    moving = judge([at(t, 10 * t) for t in range(20)])
    assert {key: states[-1][1] for key, states in moving.items()} == {'engine="0"': "progressing",
                                                                      'engine="1"': "progressing"}
    flat = judge([at(t, 5) for t in range(20)])  # no engine moved it: each one's own evidence
    assert {key: states[-1][1] for key, states in flat.items()} == {'engine="0"': "stalled",
                                                                    'engine="1"': "stalled"}


def test_a_pod_scoped_progress_gauge_is_read_only_when_the_body_has_one_engine() -> None:
    # A pod-wide gauge (a sum or a maximum over engines) can stay flat while one engine's share moves.
    two = ('vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 2\n'
           "pod_usage_perc 0.5\n")
    assert [s.progress for s in parse_exposition(two, GAUGE).series] == [(None,), (None,)]  # unknown
    one = 'vllm:num_requests_running{engine="0"} 2\npod_usage_perc 0.5\n'
    assert [s.progress for s in parse_exposition(one, GAUGE).series] == [(0.5,)]


def test_a_pod_scoped_label_set_with_running_is_an_engine_and_alone_is_the_only_one() -> None:
    alone = parse_exposition('vllm:num_requests_running 1\nvllm:sleep_mode_operations_in_flight 0\n', VLLM)
    assert [(s.labels, s.running, s.paused) for s in alone.series] == [((), 1.0, 0.0)]
    nothing = parse_exposition('vllm:sleep_mode_operations_in_flight{operation="sleep"} 1\n', VLLM)
    assert [(s.labels, s.running, s.paused) for s in nothing.series] == [((), None, 1.0)]  # unknown: no running
    mixed = parse_exposition('vllm:num_requests_running 1\nvllm:num_requests_running{engine="0"} 2\n'
                             'vllm:rl_weight_update_operations_in_flight{operation="update"} 1\n', VLLM)
    assert [(s.labels, s.running, s.paused) for s in mixed.series] == [((), 1.0, 1.0),
                                                                        ((("engine", "0"),), 2.0, 1.0)]


# ---- the Prometheus source: the same rule, through the queries' rows ------------------------------------------

@pytest.mark.parametrize("pause", PAUSES)
def test_prometheus_a_pod_scoped_paused_gauge_pauses_every_engine_of_the_pod(pause: str) -> None:
    with FakePrometheus() as prom:
        for t in (29, 30):
            prom.feed(body(t, pause), TARGET, 1000.0 + t)
        items = list(prom.series.items())
    reading = pod_reading(VLLM, items, 1030.5)
    assert reading is not None
    assert [(s.key, s.paused) for s in reading.parsed.series] == [('engine="0",model_name="m"', 1.0),
                                                                  ('engine="1",model_name="m"', 1.0)]
    assert reading.parsed.series == parse_exposition(body(30, pause), VLLM).series  # as a scrape of its body
    assert set(reading.times) == {s.labels for s in reading.parsed.series}


@pytest.mark.parametrize("pause", PAUSES)
def test_prometheus_an_engine_paused_longer_than_the_window_is_paused_never_stalled(pause: str) -> None:
    times = range(0, 61, 2)
    readings = []
    with FakePrometheus() as prom:
        for t in times:
            prom.feed(body(t, pause), TARGET, 1000.0 + t)
            reading = pod_reading(VLLM, list(prom.series.items()), 1000.0 + t + 0.5)
            assert reading is not None
            assert set(reading.times.values()) == {1000.0 + t}
            readings.append((float(t), reading.parsed.series))
    assert_paused_never_stalled(judge(readings), times)
