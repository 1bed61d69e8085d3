"""An SGLang-shaped exposition (``--enable-metrics``, 0.5.7+) of a simulated pod's engines, as SGLang prints it
through prometheus_client's multiprocess collector (no ``*_created``, labels sorted).

Split series, as in SGLang: each scheduler (one per data-parallel rank) prints its gauges and
``sglang:realtime_tokens_total{mode=...}`` on tensor-parallel rank 0 only, with ``engine_type``, ``model_name``,
``moe_ep_rank``, ``pp_rank``, ``tp_rank`` (and ``dp_rank`` when there are several); every TP rank prints a copy
of ``sglang:cuda_graph_passes_total``. The tokenizer process prints ``sglang:prompt_tokens_total`` and
``sglang:generation_tokens_total`` with ``engine_type``/``model_name``/``is_streaming`` only, and moves them
only when a request finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from watchdog.demo.simpod.engine import PREFILL_CHUNK, EngineModel


class PodShape(Protocol):
    """What this module reads of a simulated pod (watchdog.demo.simpod.pod.SimPod)."""

    @property
    def engines(self) -> Sequence[EngineModel]: ...
    model_name: str
    running: int
    waiting: int
    wedged_running: int

TP_RANKS = 2  # each scheduler's TP group: rank 1 prints copies of the per-pass counter
TOKENS_PER_REQUEST = 400  # generation tokens a finished request adds to the tokenizer's counter


def sglang_families(pod: PodShape, now: float) -> list[Metric]:
    """Every family of ``pod``'s engines (one per dp rank) at monotonic time ``now``."""
    several = len(pod.engines) > 1
    sched = sorted(["engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank", *(["dp_rank"] if several
                                                                                          else [])])
    by_mode = sorted([*sched, "mode"])
    running = GaugeMetricFamily("sglang:num_running_reqs", "The number of running requests.", labels=sched)
    queue = GaugeMetricFamily("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                              labels=sched)
    realtime = CounterMetricFamily(
        "sglang:realtime_tokens", "Total number of tokens processed (updated on each log interval). mode: "
        "prefill_compute, prefill_cache, decode.", labels=by_mode)
    passes = CounterMetricFamily("sglang:cuda_graph_passes", "Total number of forward passes categorized by CUDA "
                                 "graph.", labels=by_mode)
    finished_total = 0
    for rank, engine in enumerate(pod.engines):
        mode = engine.effective(now)
        busy, waiting = {"progressing": (pod.running, pod.waiting), "idle": (0, 0), "prefill": (1, 0)}.get(
            mode, (pod.wedged_running, 0))
        prefill = engine.prompt + engine.prefill_steps * PREFILL_CHUNK
        for tp in range(TP_RANKS):
            labels = {"engine_type": "unified", "model_name": pod.model_name, "moe_ep_rank": "0", "pp_rank": "0",
                      "tp_rank": str(tp), **({"dp_rank": str(rank)} if several else {})}
            passes.add_metric(_values(by_mode, labels, mode="decode_cuda_graph"),
                              float(int(sum(engine.buckets) + engine.prefill_steps)))
            if tp:
                continue  # gauges and realtime tokens: attention TP rank 0 only
            running.add_metric(_values(sched, labels), float(busy))
            queue.add_metric(_values(sched, labels), float(waiting))
            for token_mode, value in (("prefill_compute", prefill), ("prefill_cache", 1024.0),
                                      ("decode", engine.generation)):
                realtime.add_metric(_values(by_mode, labels, mode=token_mode), float(int(value)))
        finished_total += int(engine.requests)
    tokenizer = ["engine_type", "is_streaming", "model_name"]
    prompt = CounterMetricFamily("sglang:prompt_tokens", "Number of prefill tokens processed.", labels=tokenizer)
    generation = CounterMetricFamily("sglang:generation_tokens", "Number of generation tokens processed.",
                                     labels=tokenizer)
    requests = CounterMetricFamily("sglang:num_requests", "Number of requests processed.", labels=tokenizer)
    for streaming, share in (("false", finished_total - finished_total // 4), ("true", finished_total // 4)):
        values = ["unified", streaming, pod.model_name]
        prompt.add_metric(values, float(share * 3 * TOKENS_PER_REQUEST))
        generation.add_metric(values, float(share * TOKENS_PER_REQUEST))
        requests.add_metric(values, float(share))
    return [running, queue, realtime, passes, prompt, generation, requests]


def _values(names: list[str], labels: dict[str, str], **more: str) -> list[str]:
    merged = {**labels, **more}
    return [merged[name] for name in names]
