"""parse_exposition on hostile input (issue 11 items 7, 8 and 22): bounded work, bounded series, BOM and # EOF.

Work is asserted by counting (lines handed to each parser), never by time; tests/bench/bench_parse.py prints
the CPU figures.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from bench.bench_parse import at_the_bounds, near_miss_body
from bench.expositions import build_vllm_v1_exposition

from watchdog.core import lines
from watchdog.core.parsing import LIMITS, ParseLimits, ParseResult, parse_exposition
from watchdog.core.profiles import PROFILES, get_profile

VLLM = get_profile("vllm")
FIXTURES = sorted((Path(__file__).parents[1] / "fixtures").glob("*.prom"))
UNBOUNDED = ParseLimits(*(10**12,) * 6)
BOM = b"\xef\xbb\xbf"


def running(engine: str, value: float, model: str = "m") -> bytes:
    return b'vllm:num_requests_running{engine="%s",model_name="%s"} %r\n' % (engine.encode(), model.encode(), value)


def assert_unknown(result: ParseResult, reason: str) -> None:
    """An overrun: the reason, and nothing that could pass for evidence."""
    assert result.overrun is not None and reason in result.overrun, result.overrun
    assert result.series == () and result.found_families == frozenset() and result.dropped_series == 0


# --- item 22: a byte order mark, and nothing after "# EOF" ---------------------------------------------------


@pytest.mark.parametrize("body", [BOM + running("0", 3) + running("1", 4),
                                  "\ufeff" + (running("0", 3) + running("1", 4)).decode()])  # fmt: skip
def test_a_byte_order_mark_does_not_drop_the_first_sample(body: bytes | str) -> None:
    result = parse_exposition(body, VLLM)
    assert [s.running for s in result.series] == [3.0, 4.0]
    assert result == parse_exposition(running("0", 3) + running("1", 4), VLLM)


def test_only_a_leading_byte_order_mark_is_skipped() -> None:
    # Inside the body it is an ordinary byte: that line is not a sample line of the profile.
    assert [s.running for s in parse_exposition(running("0", 3) + BOM + running("1", 4), VLLM).series] == [3.0]


@pytest.mark.parametrize("eof", [b"# EOF\n", b"# EOF\r\n", b"  # EOF \n"])
def test_nothing_after_eof_is_read(eof: bytes) -> None:
    after = running("0", 99) + running("1", 7) + b'vllm:num_requests_running{engine="2"} garbage\n'
    result = parse_exposition(running("0", 3) + eof + after, VLLM)
    assert [(s.key, s.running) for s in result.series] == [('engine="0",model_name="m"', 3.0)]
    assert result.skipped_lines == 0
    assert parse_exposition(BOM + eof + after, VLLM).series == ()  # "# EOF" as the first line
    assert parse_exposition(running("0", 3) + b"# EOF", VLLM).series == result.series  # the last line, no newline


@pytest.mark.parametrize("not_eof", [b"# EOF trailing\n", b"# EOFX\n", b"## EOF\n", b"#  EOF\n", b"x # EOF\n"])
def test_lines_that_only_look_like_eof_end_nothing(not_eof: bytes) -> None:
    result = parse_exposition(running("0", 3) + not_eof + running("1", 4), VLLM)
    assert [s.running for s in result.series] == [3.0, 4.0]


# --- item 8: the work per body is bounded; an overrun is unknown, never a partial result ----------------------


def test_the_issue_gzip_body_of_near_miss_lines_overruns_after_bounded_work(monkeypatch: pytest.MonkeyPatch) -> None:
    inflated = gzip.decompress(gzip.compress(near_miss_body(), 9))  # what the scrape adapter hands over
    assert len(gzip.compress(inflated, 9)) < 25_000 and len(inflated) > 7_500_000  # 23 KB -> 7.8 MB
    calls = {"fast": 0, "slow": 0}
    fast, slow = lines.parse_fast, lines.parse_slow

    def counting_fast(rest: bytes) -> object:
        calls["fast"] += 1
        return fast(rest)

    def counting_slow(line: bytes, name: str) -> object:
        calls["slow"] += 1
        return slow(line, name)

    monkeypatch.setattr(lines, "parse_fast", counting_fast)
    monkeypatch.setattr(lines, "parse_slow", counting_slow)
    result = parse_exposition(inflated, VLLM)
    assert_unknown(result, f"more than {LIMITS.fallback_lines} non-canonical lines")
    # Before the bound, each of its 132,203 lines went to prometheus_client (seconds of CPU). Its lines are never
    # remembered (3 fields): each is read whole by the strict expression, then the slow path, until the bound.
    assert calls == {"fast": LIMITS.fallback_lines + 1, "slow": LIMITS.fallback_lines}
    assert result.skipped_lines == LIMITS.fallback_lines


SMALL = ParseLimits(lines=40, candidate_lines=8, candidate_bytes=600, fallback_lines=3, fallback_bytes=200, series=5)
ESCAPED = b'vllm:num_requests_running{engine="0",model_name="a\\"b"} 1\n'  # valid, but only the slow path reads it


def sized(size: int, *, escaped: bool) -> bytes:
    """One valid sample line of exactly ``size`` bytes before its newline (escaped: only the slow path reads it)."""
    head, tail = b'vllm:num_requests_running{engine="', b'"} 1'
    fill = b"\\\\" * ((size - len(head) - len(tail)) // 2) if escaped else b"m" * (size - len(head) - len(tail))
    line = head + fill + tail
    assert len(line) == size, "pick an even size for escaped lines"
    return line + b"\n"


@pytest.mark.parametrize(
    ("at_bound", "over", "reason"),
    [
        (running("0", 1) + b"\n" * 39, running("0", 1) + b"\n" * 40, "more than 40 lines"),
        (running("0", 1) * 8, running("0", 1) * 9, "more than 8 lines of the profile's metrics"),
        (sized(600, escaped=False), sized(601, escaped=False), "lines of the profile's metrics over 600 bytes"),
        (ESCAPED * 3, ESCAPED * 4, "more than 3 non-canonical lines"),
        (sized(200, escaped=True), sized(202, escaped=True), "non-canonical lines of the profile's metrics over 200"),
    ],
    ids=["lines", "candidate_lines", "candidate_bytes", "fallback_lines", "fallback_bytes"],
)
def test_each_bound_holds_exactly(at_bound: bytes, over: bytes, reason: str) -> None:
    within = parse_exposition(at_bound, VLLM, SMALL)
    assert within.overrun is None and within.series and within.skipped_lines == 0
    assert_unknown(parse_exposition(over, VLLM, SMALL), reason)


def test_an_overrun_discards_the_valid_samples_before_it() -> None:
    body = running("0", 3) + running("1", 4) + b'vllm:num_requests_running{engine="2"} 1 2 x\n' * 10
    assert len(parse_exposition(body, VLLM, UNBOUNDED).series) == 2  # unbounded: two good series and 10 skips
    assert_unknown(parse_exposition(body, VLLM, SMALL), "non-canonical")


def test_lines_after_eof_cost_nothing_but_the_line_count() -> None:
    body = running("0", 3) + b"# EOF\n" + b'vllm:num_requests_running{engine="2"} 1 2 x\n' * 30
    result = parse_exposition(body, VLLM, SMALL)
    assert result.overrun is None and [s.running for s in result.series] == [3.0]


def test_real_expositions_are_far_inside_the_bounds() -> None:
    """8 data-parallel engines (about 390 KB) need a tenth of each work bound or less; fixtures parse unchanged."""
    body = build_vllm_v1_exposition(engines=8)
    names = {n.encode() for n in VLLM.metric_names()}
    candidates = [line for line in body.split(b"\n") if re.split(rb"[{ \t]", line.lstrip(b" \t"), maxsplit=1)[0]
                  in names]  # fmt: skip
    assert 0 < 10 * len(candidates) <= LIMITS.candidate_lines
    assert 10 * sum(len(c) for c in candidates) <= LIMITS.candidate_bytes
    assert 10 * body.count(b"\n") <= LIMITS.lines and LIMITS.series >= 8 * 8  # 8 engines, 8 times over
    for data in [body, build_vllm_v1_exposition(engines=1)] + [p.read_bytes() for p in FIXTURES]:
        for profile in PROFILES.values():
            result = parse_exposition(data, profile)
            assert repr(result) == repr(parse_exposition(data, profile, UNBOUNDED))  # repr: NaN == NaN
            assert result.overrun is None and result.dropped_series == 0


def test_the_costliest_bodies_within_the_bounds_parse_in_full() -> None:
    """What the benchmark measures as the worst case really stays within the bounds."""
    for name, body in at_the_bounds(SMALL).items():
        assert parse_exposition(body, VLLM, SMALL).overrun is None, name
    assert parse_exposition(at_the_bounds()["fallback lines"], VLLM).overrun is None


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="series"):
        ParseLimits(series=0)


# --- item 7: the engine series kept per body are bounded and what is dropped is counted -----------------------


def test_series_beyond_the_cap_are_dropped_and_counted() -> None:
    assert LIMITS.series == 64  # the documented bound
    lines = [running(str(e), e) for e in range(100)]
    result = parse_exposition(b"".join(lines), VLLM)
    assert len(result.series) == 64 and result.dropped_series == 36 and result.overrun is None
    assert [s.labels for s in result.series] == sorted(s.labels for s in result.series)
    assert result.series[-1].labels < parse_exposition(lines[-1], VLLM).series[0].labels  # the first 64 in order
    assert result == parse_exposition(b"".join(reversed(lines)), VLLM)  # line order does not pick them


def test_a_model_name_per_line_cannot_grow_the_result_beyond_the_cap() -> None:
    body = b"".join(running("0", 1, f"model-{i}") for i in range(2_000))  # within the line bound: parsed
    result = parse_exposition(body, VLLM)
    assert result.overrun is None and len(result.series) == LIMITS.series and result.dropped_series == 2_000 - 64

