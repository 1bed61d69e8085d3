"""TensorRT-LLM's iteration-level counters (issue 31 item 3), read in the newest trtllm-serve source: its
iteration-stats loop sleeps until a request completes, then drains every iteration's stats into
``log_iteration_stats`` (so ``trtllm_kv_cache_iter_missed_blocks_total`` and ``..._gen_alloc_blocks_total`` move
only when a request finishes: completion-only in the built-in profile); Dynamo's TRT-LLM worker polls
``get_stats_async`` in a loop, so there they are live: a custom profile without ``@completion`` judges them."""

from __future__ import annotations

from watchdog.core.detector import DetectorState, Sample
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import custom_profile, get_profile

TRTLLM = get_profile("trtllm")
ITERATION = ["trtllm_kv_cache_iter_missed_blocks_total", "trtllm_kv_cache_gen_alloc_blocks_total"]
DYNAMO = custom_profile("dynamo-trtllm", {"progress": ITERATION}, base="trtllm")


def body(blocks: int) -> str:
    labels = 'engine_type="trtllm",model_name="m"'
    return (f"trtllm_num_requests_running{{{labels}}} 1\n"
            f"trtllm_kv_cache_iter_missed_blocks_total{{{labels}}} {blocks}\n"
            f"trtllm_kv_cache_gen_alloc_blocks_total{{{labels}}} {blocks // 2}\n")


def states(profile_name: str, blocks: list[int]) -> list[str]:
    profile = TRTLLM if profile_name == "trtllm" else DYNAMO
    detector = DetectorState(60.0, min_samples=3, signals=profile.progress)
    out: list[str] = []
    for i, value in enumerate(blocks):
        (s,) = parse_exposition(body(value), profile).series
        out.append(detector.observe(Sample(15.0 * i, s.running, s.progress, s.waiting, s.paused)).state)
    return out


def test_the_iteration_counters_are_completion_only_signals_of_the_trtllm_profile() -> None:
    signals = {s.metric: s for s in TRTLLM.progress}
    assert all(signals[name].completion_only and signals[name].kind == "counter" for name in ITERATION)


def test_trtllm_serve_one_long_request_keeps_them_flat_and_is_unknown_never_stalled() -> None:
    assert set(states("trtllm", [128] * 10)) == {"unknown"}
    assert states("trtllm", [128, 128, 256])[-1] == "progressing"  # a request finished: the deltas arrive


def test_under_dynamos_polling_worker_they_are_live_progress_and_a_wedge_is_stalled() -> None:
    assert states("dynamo", [128 * i for i in range(10)])[1:] == ["progressing"] * 9
    assert states("dynamo", [128] * 6)[-1] == "stalled"
