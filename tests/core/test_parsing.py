"""parse_exposition: exact names, keying, format quirks, bad lines, and agreement with prometheus_client."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from bench.expositions import build_vllm_v1_exposition
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from watchdog.core.parsing import EngineSnapshot, parse_exposition
from watchdog.core.profiles import PROFILES, Profile, get_profile

FIXTURES = Path(__file__).parents[1] / "fixtures"
VLLM = get_profile("vllm")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def by_key(body: bytes | str, profile: Profile = VLLM) -> dict[str, EngineSnapshot]:
    return {s.key: s for s in parse_exposition(body, profile).series}


def values(snapshot: EngineSnapshot) -> tuple[float | None, ...]:
    return (snapshot.running, snapshot.waiting, *snapshot.progress, snapshot.paused)


def reference(body: bytes, profile: Profile) -> dict[tuple[tuple[str, str], ...], list[float | None]]:
    """The same aggregation computed from a FULL prometheus_client parse of the whole body, written out
    independently: per selector, sum over other labels per rank, largest rank wins; waiting minus the ignored
    series (not below 0); paused the largest; label sets without running dropped when some have it; the
    unlabeled (pod-scoped) one, unless an engine itself, applied to every engine: its pause folded in, its
    ignored waiting and progress counters (gauges too with one engine) where the engine has none."""
    slots = [profile.running, profile.waiting, *profile.waiting_ignored, *profile.progress, *profile.paused,
             *profile.awake]
    latest: dict[tuple[int, frozenset[tuple[str, str]]], tuple[tuple[tuple[str, str], ...], tuple[str, ...], float]]
    latest = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for sample in family.samples:
            for index, selector in enumerate(slots):
                if selector is not None and sample.name == selector.metric and selector.matches(sample.labels):
                    key = tuple((n, sample.labels[n]) for n in sorted(profile.engine_labels) if n in sample.labels)
                    rank = tuple(sample.labels.get(n, "") for n in sorted(profile.collapse_labels))
                    latest[(index, frozenset(sample.labels.items()))] = (key, rank, float(sample.value))
    sums: dict[tuple[tuple[tuple[str, str], ...], int, tuple[str, ...]], float] = {}
    for (index, _), (key, rank, value) in latest.items():
        sums[(key, index, rank)] = sums.get((key, index, rank), 0.0) + value
    rows: dict[tuple[tuple[str, str], ...], list[float | None]] = {}
    for (key, index, _), value in sums.items():
        row = rows.setdefault(key, [None] * len(slots))
        current = row[index]
        row[index] = value if current is None or math.isnan(current) or value > current else current
    pod = rows.get(())
    if any(row[0] is not None for row in rows.values()):
        rows = {key: row for key, row in rows.items() if row[0] is not None}
    if pod is not None and pod[0] is None and len(rows) > 1:
        rows.pop((), None)
    out = {}
    first_progress = 2 + len(profile.waiting_ignored)
    first_paused = first_progress + len(profile.progress)
    for key, own in rows.items():
        row = list(own)
        if key and pod is not None:
            shared = [*range(2, first_progress), *(first_progress + i for i, s in enumerate(profile.progress)
                                                   if s.kind == "counter" or len(rows) == 1)]
            row = [pod[i] if v is None and i in shared else v for i, v in enumerate(row)]
            row += pod[first_paused:first_paused + len(profile.paused)] + pod[first_paused + len(profile.paused):]
        waiting = row[1]
        deferred = sum(v for v in row[2:first_progress] if v is not None and 0 <= v < math.inf)
        if waiting is not None and deferred and 0 <= waiting < math.inf:
            waiting = max(0.0, waiting - deferred)
        first_awake = first_paused + len(profile.paused)
        pod_part = len(row) - len(own)  # the pod-scoped paused and awake values appended to an engine's own
        pod_awake = len(row) - len(profile.awake) if pod_part else len(row)
        paused = [v for v in row[first_paused:first_awake] + row[len(own):pod_awake] if v is not None]
        paused += [float(v == 0) for v in row[first_awake:len(own)] + row[pod_awake:]
                   if v is not None and 0 <= v < math.inf]
        top = max(paused, key=lambda v: -math.inf if math.isnan(v) else v) if paused else None
        out[key] = [row[0], waiting, *row[first_progress:first_paused], top]
    return out


def sig(snap: EngineSnapshot, name: str, profile: Profile = VLLM) -> float | None:
    """The value of progress signal ``name`` in ``snap``."""
    return snap.progress[profile.progress_names().index(name)]


def five(snap: EngineSnapshot) -> tuple[float | None, ...]:
    """running, waiting, generation and prompt tokens, step count: the five classic vLLM signals."""
    return (snap.running, snap.waiting, sig(snap, "vllm:generation_tokens_total"),
            sig(snap, "vllm:prompt_tokens_total"), sig(snap, "vllm:iteration_tokens_total_count"))


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == b


WELL_FORMED = [
    ("vllm-v0-lora-multimodel.prom", "vllm"),
    ("vllm-v1-created-lookalikes.prom", "vllm"),
    ("vllm-format-quirks.prom", "vllm"),
    ("vllm-openmetrics-crlf.prom", "vllm"),
    ("sglang-ranks.prom", "sglang"),
    ("llamacpp.prom", "llamacpp"),
]
GENERATED = {
    "v1-1engine": build_vllm_v1_exposition(engines=1),
    "v1-8engines": build_vllm_v1_exposition(engines=8, running=[20, 21, 17, 24, 15, 22, 15, 25]),
    "v1-2engines-multiprocess": build_vllm_v1_exposition(engines=2, created=False, process_metrics=False),
    "v1-idle": build_vllm_v1_exposition(engines=1, running=0, waiting=0),
    # vLLM 0.33 prints these two with the operation label only: pod-scoped, applied to every engine
    "v1-2engines-pod-scoped-pauses": build_vllm_v1_exposition(engines=2, created=False) + (
        b"# TYPE vllm:rl_weight_update_operations_in_flight gauge\n"
        b'vllm:rl_weight_update_operations_in_flight{operation="update_weights"} 1.0\n'
        b"# TYPE vllm:sleep_mode_operations_in_flight gauge\n"
        b'vllm:sleep_mode_operations_in_flight{operation="sleep"} 0.0\n'),
}


@pytest.mark.parametrize(
    ("body", "profile"),
    [pytest.param(fixture(n), p, id=n) for n, p in WELL_FORMED]
    + [pytest.param(b, "vllm", id=k) for k, b in GENERATED.items()],
)
def test_agrees_with_a_full_prometheus_client_parse(body: bytes, profile: str) -> None:
    prof = PROFILES[profile]
    result = parse_exposition(body, prof)
    expected = reference(body, prof)
    assert result.skipped_lines == 0
    assert [s.labels for s in result.series] == sorted(expected)
    for snapshot in result.series:
        assert all(same(a, b) for a, b in zip(values(snapshot), expected[snapshot.labels], strict=True)), snapshot


def test_data_parallel_8_engines_gives_8_series_with_exact_values() -> None:
    # waiting 3 = 2 for capacity + 1 deferred (a KV transfer): the deferred one is not counted.
    running = [20, 21, 17, 24, 15, 22, 15, 25]
    body = build_vllm_v1_exposition(
        engines=8, running=running, waiting=3, generation_tokens=[1000 + e for e in range(8)],
        prompt_tokens=5e6, iterations=[7e5 + e for e in range(8)],
    )  # fmt: skip
    series = parse_exposition(body, VLLM).series
    assert [dict(s.labels)["engine"] for s in series] == [str(e) for e in range(8)]
    assert [s.running for s in series] == running
    assert [sig(s, "vllm:generation_tokens_total") for s in series] == [1000.0 + e for e in range(8)]
    assert [sig(s, "vllm:iteration_tokens_total_count") for s in series] == [7e5 + e for e in range(8)]
    assert {s.waiting for s in series} == {2.0} and {sig(s, "vllm:prompt_tokens_total") for s in series} == {5e6}


def test_exact_names_never_prefixes() -> None:
    # waiting_by_reason (1000), *_created (1.7e9) and the heartbeat's _sum/_bucket are other series.
    snap = by_key(fixture("vllm-v1-created-lookalikes.prom"))['engine="0",model_name="m"']
    assert five(snap) == (21.0, 2.0, 9332410.0, 86354921.0, 505602.0)


def test_lookalike_only_body_finds_nothing() -> None:
    body = (
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 4\n'
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
        'vllm:iteration_tokens_total_sum{engine="0"} 12\n'
        'vllm:iteration_tokens_total_bucket{engine="0",le="+Inf"} 3\n'
        "vllm:num_requests_running_total 3\n"
        "xvllm:num_requests_running 3\n"
    )
    result = parse_exposition(body, VLLM)
    assert result.series == () and result.found_families == frozenset() and result.skipped_lines == 0


def test_other_labels_are_summed_model_name_keeps_models_apart() -> None:
    series = by_key(fixture("vllm-v0-lora-multimodel.prom"))
    assert set(series) == {'model_name="/models/Qwen2.5-7B/"', 'model_name="llama-3-8b"'}
    llama = series['model_name="llama-3-8b"']
    assert five(llama) == (2.0, 7.0, 520.5, 1234.0, 998.0)  # LoRA adapters summed: 500.5 + 20, 1000 + 234
    qwen = series['model_name="/models/Qwen2.5-7B/"']
    assert five(qwen) == (3.0, 0.0, 955.0, 11701968896.0, 41.0)  # integers without .0, e+010


def test_duplicate_sample_last_wins_not_summed() -> None:
    body = 'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="0"} 4\n'
    assert by_key(body)['engine="0"'].running == 4.0


def test_label_order_does_not_split_a_series() -> None:
    body = (
        'vllm:num_requests_running{model_name="m",engine="0",lora="a"} 1\n'
        'vllm:num_requests_running{engine="0",lora="b",model_name="m"} 2\n'
    )
    assert list(by_key(body)) == ['engine="0",model_name="m"']
    assert by_key(body)['engine="0",model_name="m"'].running == 3.0


def test_invalid_utf8_in_a_label_value_is_replaced_and_every_pair_stays_in_place() -> None:
    body = (b'vllm:num_requests_running{engine="0",model_name="a\xe2"} 3\n'
            b'vllm:num_requests_running{model_name="\xff\xfe\xc3",engine="1"} 4\n')
    assert {k: s.running for k, s in by_key(body).items()} == {
        'engine="0",model_name="a\ufffd"': 3.0, 'engine="1",model_name="\ufffd\ufffd\ufffd"': 4.0}


def test_format_quirks_values() -> None:
    series = by_key(fixture("vllm-format-quirks.prom"))
    odd = series['engine="0",model_name="a \\"quoted\\" {model}, with = and /paths/"']
    assert odd.labels == (("engine", "0"), ("model_name", 'a "quoted" {model}, with = and /paths/'))
    assert odd.running == 1e100 and odd.waiting == 0.0015
    assert sig(odd, "vllm:generation_tokens_total") == 12345678901234.0
    assert sig(odd, "vllm:prompt_tokens_total") is None  # HELP/TYPE without samples: unknown, not 0
    assert series['engine="1",model_name="C:\\\\models\\\\x"'].running == 5.0  # timestamp ignored
    assert math.isnan(series["engine=\"2\",model_name=\"{'method': 'prefill', 'x': \\\"y\\\"}\""].running or 0)
    three = series['engine="3",model_name="m"']
    assert three.running == math.inf and three.waiting == -math.inf
    assert five(three)[2:] == (3.0, None, 10.0)  # spaces inside braces; ts -5
    assert series['engine="4",model_name="m"'].running == 7.0  # tab separator, labels out of order


def test_garbage_lines_skipped_and_counted_rest_kept() -> None:
    result = parse_exposition(fixture("vllm-garbage.prom"), VLLM)
    # twenty, unterminated quote, duplicate label, __name__ twice, 1_000, no value, truncated heartbeat.
    assert result.skipped_lines == 7
    assert [five(s) for s in result.series] == [(21.0, None, 100.0, 50.0, None)]
    assert "vllm:num_requests_waiting" not in result.found_families
    assert "vllm:iteration_tokens_total_count" not in result.found_families


def test_truncated_body_keeps_complete_lines() -> None:
    body = build_vllm_v1_exposition(engines=2)
    cut = body.index(b'vllm:num_requests_running{engine="1"') + 30
    result = parse_exposition(body[:cut], VLLM)
    assert result.skipped_lines == 1
    assert [s.running for s in result.series] == [20.0]


@pytest.mark.parametrize(
    "body", [b"", "", b"\n\n", b"# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"]
)
def test_empty_or_sample_free_body(body: bytes | str) -> None:
    assert parse_exposition(body, VLLM) == parse_exposition(b"", VLLM)
    assert parse_exposition(b"", VLLM).series == () and parse_exposition(b"", VLLM).skipped_lines == 0


def test_missing_family_is_none_never_zero() -> None:
    body = 'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
    (snap,) = parse_exposition(body, VLLM).series
    assert values(snap) == (0.0, None, *([None] * len(VLLM.progress)), None)


def test_first_line_leading_blanks_crlf_and_str_input() -> None:
    body = "vllm:num_requests_running 2\r\n  vllm:num_requests_waiting\t3\r\n# EOF\r\n"
    result = parse_exposition(body, VLLM)
    assert [five(s) for s in result.series] == [(2.0, 3.0, None, None, None)]
    assert result == parse_exposition(body.encode(), VLLM)
    assert result.series[0].key == ""


def test_v0_model_name_only_and_v1_engine_series_stay_apart() -> None:
    body = 'vllm:num_requests_running{model_name="m"} 1\nvllm:num_requests_running{engine="0",model_name="m"} 2\n'
    assert list(by_key(body)) == ['engine="0",model_name="m"', 'model_name="m"']


def test_other_profiles() -> None:
    (llama,) = parse_exposition(fixture("llamacpp.prom"), get_profile("llamacpp")).series
    # n_decode_total (live), tokens_predicted_total, prompt_tokens_total (completion-only); no paused gauge
    assert llama.labels == () and values(llama) == (2.0, 0.0, 21500.0, 20931.0, 4812.0, None)
    sglang = get_profile("sglang")
    (tp,) = parse_exposition(fixture("sglang-ranks.prom"), sglang).series  # tp ranks are copies: not added up
    assert tp.labels == (("engine_type", "unified"), ("model_name", "meta-llama/Llama-3.1-8B-Instruct"))
    assert (tp.running, tp.waiting) == (162.0, 2826.0)
    assert sig(tp, "sglang:generation_tokens_total", sglang) == 7557572.0  # max of the two ranks, not 2x


def test_found_families_and_snapshot_dict() -> None:
    result = parse_exposition(fixture("vllm-openmetrics-crlf.prom"), VLLM)
    assert result.found_families == {"vllm:num_requests_running", "vllm:generation_tokens_total"}
    as_dict = result.series[0].as_dict(VLLM)
    assert as_dict == {
        "labels": {"engine": "0", "model_name": "m"}, "running": 4.0, "waiting": None, "paused": None,
        "progress": {name: (10.0 if name == "vllm:generation_tokens_total" else None)
                     for name in VLLM.progress_names()},
    }  # fmt: skip


_label_value = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_number = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("inf", "Inf")),
    st.sampled_from(["1e+100", "1.1701968896e+010", "-1.0", "NaN", "+Inf", "-Inf", "0.07500000000000001"]),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=300, deadline=None)
@given(
    engine=_label_value, model=_label_value, extra=st.one_of(st.none(), _label_value), value=_number,
    timestamp=st.one_of(st.none(), st.integers(0, 2**41).map(str)), sep=st.sampled_from([" ", "\t", "  "]),
)  # fmt: skip
def test_any_single_line_agrees_with_prometheus_client(
    engine: str, model: str, extra: str | None, value: str, timestamp: str | None, sep: str
) -> None:
    labels = f'engine="{_escape(engine)}",model_name="{_escape(model)}"'
    if extra is not None:
        labels += f',lora_name="{_escape(extra)}"'
    line = f"vllm:generation_tokens_total{{{labels}}}{sep}{value}" + (f" {timestamp}" if timestamp else "")
    body = f"# TYPE vllm:generation_tokens_total counter\n{line}\n"
    expected = reference(body.encode(), VLLM)
    (snap,) = parse_exposition(body, VLLM).series
    assert snap.labels == (("engine", engine), ("model_name", model))
    assert same(sig(snap, "vllm:generation_tokens_total"), expected[snap.labels][2])


def test_a_bad_line_among_good_ones_is_judged_like_prometheus_client() -> None:
    for bad in ('vllm:num_requests_running{engine="0"} 1 2 x', 'vllm:num_requests_running{engine="0",} 1_0'):
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(bad))
        assert parse_exposition(bad, VLLM).skipped_lines == 1


def test_series_keys_are_remembered_bounded_and_written_the_same() -> None:
    from watchdog.core import parsing

    parsing._KEYS.clear()
    quoted = (("engine", 'a"b\\c\nd'), ("model_name", "m"))
    first = EngineSnapshot(quoted, 1.0).key
    assert first == 'engine="a\\"b\\\\c\\nd",model_name="m"'
    assert EngineSnapshot(quoted, 2.0).key == first and parsing._KEYS[quoted] == first
    long = (("engine", "x" * 600),)
    assert EngineSnapshot(long, 1.0).key == f'engine="{"x" * 600}"' and long not in parsing._KEYS
    for i in range(5000):  # a tenant printing ever new label sets: the memo stays bounded
        assert EngineSnapshot((("engine", str(i)),), 1.0).key == f'engine="{i}"'
    assert 0 < len(parsing._KEYS) <= 4096
