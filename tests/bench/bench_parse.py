"""Benchmark (not a test): CPU time of parsing one full-size vLLM V1 exposition, 1 and 8 engines.

    python tests/bench/bench_parse.py [--repeat N]

Prints, per body, the median ``time.process_time`` (milliseconds) of: ``parse_exposition`` (ours), a full
``prometheus_client`` parse (``text_string_to_metric_families`` over the decoded body) and a bare
``body.split(b"\\n")``, with the ratios full/ours (goal >= 30) and ours/split (goal <= 3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

from prometheus_client.parser import text_string_to_metric_families

from bench.expositions import build_vllm_v1_exposition
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import get_profile


def median_ms(fn: Callable[[], object], repeat: int, inner: int) -> float:
    """Median CPU milliseconds of one ``fn()`` call over ``repeat`` rounds of ``inner`` calls each."""
    rounds = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(inner):
            fn()
        rounds.append((time.process_time() - start) / inner)
    return statistics.median(rounds) * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=31, help="rounds per measurement (default: 31)")
    args = parser.parse_args()
    profile = get_profile("vllm")
    print(f"{'body':<22}{'bytes':>9}{'lines':>7}{'ours ms':>10}{'full ms':>10}{'split ms':>10}"
          f"{'full/ours':>11}{'ours/split':>12}")  # fmt: skip
    for engines in (1, 8):
        body = build_vllm_v1_exposition(engines=engines)
        result = parse_exposition(body, profile)
        assert len(result.series) == engines and result.skipped_lines == 0, result
        ours = median_ms(lambda b=body: parse_exposition(b, profile), args.repeat, 20)
        full = median_ms(lambda b=body: list(text_string_to_metric_families(b.decode())), max(5, args.repeat // 3), 1)
        split = median_ms(lambda b=body: b.split(b"\n"), args.repeat, 20)
        lines = body.count(b"\n")
        name = f"vLLM V1, {engines} engine{'s' if engines > 1 else ''}"
        print(f"{name:<22}{len(body):>9}{lines:>7}{ours:>10.3f}{full:>10.2f}{split:>10.3f}"
              f"{full / ours:>10.0f}x{ours / split:>11.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
