"""Fuzzing the two pure cores that read untrusted input: the exposition parser and the detector.

CI runs a bounded number of examples per test (default 200). A long run, with zero crashes expected:

    FUZZ_EXAMPLES=100000 .venv/bin/python -m pytest tests/core/test_fuzz.py -q
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from watchdog.core.detector import DetectorState, Sample, window_slack
from watchdog.core.parsing import LIMITS, ParseLimits, ParseResult, parse_exposition
from watchdog.core.profiles import PROFILES, get_profile

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
FIXTURES = sorted((Path(__file__).parents[1] / "fixtures").glob("*.prom"))
CORPUS = [p.read_bytes() for p in FIXTURES]
VLLM = get_profile("vllm")


def well_formed(result: ParseResult, limits: ParseLimits = LIMITS) -> None:
    assert result.skipped_lines >= 0 and result.dropped_series >= 0
    assert len(result.series) <= limits.series
    if result.overrun is not None:  # unknown: nothing that could pass for evidence
        assert result.overrun and not result.series and not result.found_families and not result.dropped_series
    keys = [s.key for s in result.series]
    assert len(keys) == len(set(keys)), "one snapshot per engine series"
    for snap in result.series:
        for value in (snap.running, snap.waiting, *snap.progress, snap.paused):
            assert value is None or isinstance(value, float)


@FUZZ
@given(st.binary(max_size=4096), st.sampled_from(sorted(PROFILES)))
def test_random_bytes_never_crash_the_parser(body: bytes, profile: str) -> None:
    well_formed(parse_exposition(body, get_profile(profile)))


@FUZZ
@given(st.sampled_from(CORPUS), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 8), st.binary(max_size=12)),
                                         max_size=12))
def test_mutated_real_expositions_never_crash_the_parser(body: bytes, edits: list[tuple[int, int, bytes]]) -> None:
    data = bytearray(body)
    for pos, cut, insert in edits:  # splice: delete `cut` bytes at `pos`, insert `insert`
        pos %= len(data) + 1
        data[pos:pos + cut] = insert
    well_formed(parse_exposition(bytes(data), VLLM))


line = st.one_of(
    st.sampled_from([b"vllm:num_requests_running", b"vllm:generation_tokens_total", b"vllm:prompt_tokens_total",
                     b"vllm:iteration_tokens_total_count", b"# TYPE vllm:num_requests_running gauge", b"# EOF"]),
    st.binary(max_size=40),
)
labels = st.dictionaries(st.sampled_from(["engine", "model_name", "x"]), st.text(max_size=30), max_size=3)
values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**20, 10**20),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e+100", "0x10", "", "--1"]))


@FUZZ
@given(st.lists(st.tuples(line, labels, values, st.one_of(st.none(), st.integers(0, 2**40))), max_size=30))
def test_structured_garbage_with_huge_labels_and_duplicates(rows: list[tuple[bytes, dict[str, str], object,
                                                                              int | None]]) -> None:
    out = []
    for name, labelset, value, ts in rows:
        inner = ",".join(f'{k}="{v}"' for k, v in labelset.items()).encode("utf-8", "surrogatepass")
        text = name + (b"{" + inner + b"}" if labelset else b"") + b" " + str(value).encode()
        out.append(text + (b" %d" % ts if ts is not None else b""))
    out += out[: len(out) // 2]  # duplicate series
    well_formed(parse_exposition(b"\n".join(out), VLLM))


small_limits = st.builds(ParseLimits, lines=st.integers(1, 60), candidate_lines=st.integers(1, 40),
                         candidate_bytes=st.integers(1, 3000), fallback_lines=st.integers(1, 10),
                         fallback_bytes=st.integers(1, 500), series=st.integers(1, 6))
UNBOUNDED = ParseLimits(*(10**12,) * 6)


def garbage_body(rows: list[tuple[bytes, dict[str, str], object, int | None]]) -> bytes:
    out = []
    for name, labelset, value, ts in rows:
        inner = ",".join(f'{k}="{v}"' for k, v in labelset.items()).encode("utf-8", "surrogatepass")
        out.append(name + (b"{" + inner + b"}" if labelset else b"") + b" " + str(value).encode()
                   + (b" %d" % ts if ts is not None else b""))
    return b"\n".join(out)


bodies = st.one_of(st.lists(st.tuples(line, labels, values, st.one_of(st.none(), st.integers(0, 2**40))),
                            max_size=30).map(garbage_body),
                   st.sampled_from(CORPUS), st.binary(max_size=512))


def same(a: ParseResult, b: ParseResult) -> bool:
    return repr(a) == repr(b)  # repr: NaN equals NaN


@FUZZ
@given(bodies, small_limits)
def test_bounds_only_refuse_never_alter(body: bytes, limits: ParseLimits) -> None:
    """Within the bounds the result is the unbounded one (series cut at the cap, counted); beyond, unknown."""
    bounded, full = parse_exposition(body, VLLM, limits), parse_exposition(body, VLLM, UNBOUNDED)
    well_formed(bounded, limits)
    if bounded.overrun is None:
        assert repr(bounded.series) == repr(full.series[: limits.series])  # repr: NaN equals NaN
        assert bounded.dropped_series == len(full.series) - len(bounded.series)
        assert (bounded.skipped_lines, bounded.found_families) == (full.skipped_lines, full.found_families)


@FUZZ
@given(bodies, bodies, st.sampled_from([b"# EOF\n", b"# EOF\r\n", b"# EOF"]))
def test_nothing_after_eof_counts_and_a_byte_order_mark_is_invisible(body: bytes, tail: bytes, eof: bytes) -> None:
    plain = parse_exposition(body, VLLM)
    assert same(parse_exposition(body + b"\n" + eof + (tail if eof.endswith(b"\n") else b""), VLLM), plain)
    if not body.startswith(b"\xef\xbb\xbf"):
        assert same(parse_exposition(b"\xef\xbb\xbf" + body, VLLM), plain)


maybe = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**9).map(float))


@FUZZ
@given(st.lists(st.tuples(st.floats(-1e6, 1e6, allow_nan=False), maybe, maybe, maybe, maybe, maybe), max_size=60),
       st.floats(0.5, 600), st.integers(1, 6), st.booleans())
def test_random_sample_sequences_never_crash_the_detector(rows: list[tuple[float, ...]], window: float,
                                                          min_samples: int, count_waiting: bool) -> None:
    state = DetectorState(window, min_samples=min_samples, count_waiting=count_waiting)
    for t, running, gen, prompt, waiting, heartbeat in rows:
        v = state.observe(Sample(t, running, (gen, prompt, heartbeat), waiting))
        assert v.stalled == (v.state == "stalled") and math.isfinite(v.stalled_for_s) and v.stalled_for_s >= 0
        assert v.reason and len(v.reason) < 2000
        if v.stalled:
            # the window less its slack (rule 4), never less
            assert v.stalled_for_s >= window - window_slack(window) and v.busy_samples >= min_samples
