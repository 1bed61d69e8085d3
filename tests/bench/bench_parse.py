"""Benchmark (not a test): CPU time of parsing full-size vLLM V1 expositions, and of hostile bodies.

    python tests/bench/bench_parse.py [--repeat N] [--hostile-repeat N]

Table 1, per real-shaped body (1 and 8 engines; whole, and restricted to the profile's samples as a current vLLM
answers the scrape's ``?name[]=``): the median ``time.process_time`` (milliseconds) of
``parse_exposition`` (ours), a full ``prometheus_client`` parse (``text_string_to_metric_families`` over the
decoded body) and a bare ``body.split(b"\\n")``, with the ratios full/ours (goal >= 30) and ours/split (goal <= 3).

Table 2, per hostile body (what one tenant's pod can send; :func:`hostile_bodies`, each about 7.8 MB after
inflation, the first being issue 11 item 8's 23 KB of gzip): the median CPU milliseconds of ``parse_exposition``
and what it returned (``overrun`` reason, or series/skipped/dropped counts). Before the parse bounds these took
seconds each; the bounds (``watchdog.core.parsing.LIMITS``) make them stop early with ``overrun`` set.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

from prometheus_client.parser import text_string_to_metric_families

from bench.expositions import build_vllm_v1_exposition
from watchdog.core.parsing import LIMITS, ParseLimits, ParseResult, parse_exposition
from watchdog.core.profiles import get_profile
from watchdog.demo.simpod.server import restrict

#: One near-miss line: the pre-filter's name and a label set, then garbage (three fields) that the strict
#: expression rejects, so each line went to prometheus_client, which rejects it too.
NEAR_MISS_LINE = b'vllm:num_requests_running{engine="0",model_name="m"} 1 2 x\n'


def near_miss_body(size: int = 7_800_000) -> bytes:
    """Issue 11 item 8's body: ``size`` bytes of :data:`NEAR_MISS_LINE` (about 23 KB as gzip)."""
    return NEAR_MISS_LINE * (size // len(NEAR_MISS_LINE))


def hostile_bodies(size: int = 7_800_000) -> dict[str, bytes]:
    """Bodies of about ``size`` bytes, each aimed at one cost of the parser."""
    fresh_models = b"".join(b'vllm:num_requests_running{engine="0",model_name="m%07d"} 1\n' % i
                            for i in range(size // 60))  # fmt: skip
    return {
        "near-miss lines": near_miss_body(size),
        "one series, repeated": b'vllm:num_requests_running{engine="0"} 1.0\n' * (size // 42),
        "new model_name per line": fresh_models,
        "escaped labels (fallback)": b'vllm:num_requests_running{engine="0",model_name="a\\"b"} 1\n' * (size // 58),
        "one long escaped line": b'vllm:num_requests_running{engine="' + b"\\\\" * (size // 2) + b'"} 1\n',
        "one line of value-like fields": b"vllm:num_requests_running " + b"1\t " * (size // 3) + b"\n",
        "empty lines": b"\n" * size,
    }


def at_the_bounds(limits: ParseLimits = LIMITS) -> dict[str, bytes]:
    """The costliest bodies that stay within ``limits`` (parsed in full, no overrun), one per bound, and all."""
    fallback_line = b'vllm:num_requests_running{engine="0",model_name="a\\"b",x="%s"} 1\n'  # escaped: slow path
    fallback_size = limits.fallback_bytes // limits.fallback_lines  # bytes per line, newline included
    pad = b"y" * (fallback_size - len(fallback_line % b""))
    fallbacks = b"".join(fallback_line % (pad[: -len(b"%d" % i)] + b"%d" % i) for i in range(limits.fallback_lines))
    fast_lines = limits.candidate_lines - limits.fallback_lines
    fast_size = (limits.candidate_bytes - len(fallbacks)) // fast_lines
    fast_line = b'vllm:num_requests_running{engine="0",model_name="%s"} 1\n'
    fast_pad = b"m" * (fast_size - len(fast_line % b""))
    fast = b"".join(fast_line % (fast_pad[: -len(b"%d" % i)] + b"%d" % i) for i in range(fast_lines))
    long_line = b'vllm:num_requests_running{engine="' + b"\\\\" * (limits.fallback_bytes // 2 - 24) + b'"} 1\n'
    return {
        "distinct canonical lines": b"".join(fast_line % b"%d" % i for i in range(limits.candidate_lines)),
        "fallback lines": fallbacks,
        "one long fallback line": long_line,
        "empty lines": b"\n" * limits.lines,
        "all of the above": fast + fallbacks + b"\n" * (limits.lines - limits.candidate_lines),
    }


def median_ms(fn: Callable[[], object], repeat: int, inner: int) -> float:
    """Median CPU milliseconds of one ``fn()`` call over ``repeat`` rounds of ``inner`` calls each."""
    rounds = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(inner):
            fn()
        rounds.append((time.process_time() - start) / inner)
    return statistics.median(rounds) * 1000.0


def outcome(result: ParseResult) -> str:
    """What one hostile parse returned, in a few words (works without the newer fields, for comparisons)."""
    overrun = getattr(result, "overrun", None)
    if overrun:
        return f"overrun: {overrun}"
    dropped = getattr(result, "dropped_series", "n/a")
    return f"series {len(result.series)}, skipped {result.skipped_lines}, dropped {dropped}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=31, help="rounds per measurement (default: 31)")
    parser.add_argument("--hostile-repeat", type=int, default=3, help="rounds per hostile body (default: 3)")
    args = parser.parse_args()
    profile = get_profile("vllm")
    print(f"{'body':<30}{'bytes':>9}{'lines':>7}{'ours ms':>10}{'full ms':>10}{'split ms':>10}"
          f"{'full/ours':>11}{'ours/split':>12}")  # fmt: skip
    for engines, restricted in ((1, False), (8, False), (1, True), (8, True)):
        body = build_vllm_v1_exposition(engines=engines)
        body = restrict(body, set(profile.metric_names())) if restricted else body
        result = parse_exposition(body, profile)
        assert len(result.series) == engines and result.skipped_lines == 0, result
        ours = median_ms(lambda b=body: parse_exposition(b, profile), args.repeat, 20)
        full = median_ms(lambda b=body: list(text_string_to_metric_families(b.decode())), max(5, args.repeat // 3), 1)
        split = median_ms(lambda b=body: b.split(b"\n"), args.repeat, 20)
        lines = body.count(b"\n")
        name = f"vLLM V1, {engines} engine{'s' if engines > 1 else ''}{', ?name[]' if restricted else ''}"
        print(f"{name:<30}{len(body):>9}{lines:>7}{ours:>10.3f}{full:>10.2f}{split:>10.3f}"
              f"{full / ours:>10.0f}x{ours / split:>11.2f}x")  # fmt: skip
    print()
    print(f"{'hostile body':<28}{'bytes':>10}{'gzip':>8}{'lines':>9}{'ours ms':>10}  result")
    for name, body in hostile_bodies().items():
        ms = median_ms(lambda b=body: parse_exposition(b, profile), args.hostile_repeat, 1)
        packed, lines = len(gzip.compress(body, 9)), body.count(b"\n")
        print(f"{name:<28}{len(body):>10}{packed:>8}{lines:>9}{ms:>10.1f}  "
              f"{outcome(parse_exposition(body, profile))}")
    print()
    print(f"{'at the bounds':<28}{'bytes':>10}{'gzip':>8}{'lines':>9}{'ours ms':>10}  result")
    for name, body in at_the_bounds().items():
        ms = median_ms(lambda b=body: parse_exposition(b, profile), args.hostile_repeat * 3, 1)
        packed, lines = len(gzip.compress(body, 9)), body.count(b"\n")
        print(f"{name:<28}{len(body):>10}{packed:>8}{lines:>9}{ms:>10.1f}  "
              f"{outcome(parse_exposition(body, profile))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
