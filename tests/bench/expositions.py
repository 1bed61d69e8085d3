"""Full-size vLLM V1 ``/metrics`` bodies, generated in code (for benchmarks, tests and simulated pods).

:func:`build_vllm_v1_exposition` writes what one vLLM V1 API server returns: the default python/process
collectors, every ``vllm:*`` family of a recent V1 release (counters with their ``_created`` gauge
families, histograms with their real bucket bounds), the per-engine ``cache_config_info`` and the ``http_*``
families of prometheus-fastapi-instrumentator, labels sorted by name (prometheus_client output). One engine
is about 70 KB / 690 lines; eight data-parallel engines about 390 KB / 3,400 lines.

The five stall signals are set exactly from the arguments (scalars apply to every engine, sequences give one
value per engine); everything else is filled from a seeded traffic model, so equal arguments give equal bytes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from prometheus_client.utils import floatToGoString

__all__ = ["build_vllm_v1_exposition"]

Num = float | int
PerEngine = Num | Sequence[Num]

_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
_PHASE_S = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)
_ITL_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80)
_TTFT_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
           160, 640, 2560)  # fmt: skip
_STEP_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# (name, help, extra label name, extra label values) for per-engine counters.
_COUNTERS = (
    ("vllm:estimated_flops_per_gpu", "Estimated number of floating point operations per GPU.", None, ()),
    ("vllm:estimated_read_bytes_per_gpu", "Estimated number of bytes read from memory per GPU.", None, ()),
    ("vllm:estimated_write_bytes_per_gpu", "Estimated number of bytes written to memory per GPU.", None, ()),
)
_CACHE_COUNTERS = (
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", None, ()),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", None, ()),
    ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector.", None, ()),
    ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector.", None, ()),
    ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", None, ()),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", None, ()),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", None, ()),
)
_HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKENS),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", _STEP_TOKENS),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
     _TOKENS),
    ("vllm:request_params_n", "Histogram of the n request parameter.", (1, 2, 5, 10, 20)),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", _TOKENS),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT_S),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _ITL_S),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
     _ITL_S),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _PHASE_S),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _PHASE_S),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", _PHASE_S),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", _PHASE_S),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", _PHASE_S),
    ("vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.",
     (1, 2, 3, 4, 5, 10, 20)),
    ("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill.", _TOKENS),
)  # fmt: skip
_HANDLERS = ("/v1/models", "/v1/chat/completions", "/v1/completions", "none")


def _per_engine(value: PerEngine | None, engines: int, name: str) -> list[float] | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return [float(value)] * engines
    if len(value) != engines:
        raise ValueError(f"{name}: {len(value)} values for {engines} engines")
    return [float(v) for v in value]


def _num(value: float) -> str:
    """prometheus_client's float formatting (``1.1891712e+09``, ``+Inf``)."""
    return floatToGoString(float(value))


def build_vllm_v1_exposition(
    engines: int = 1,
    running: PerEngine = 20,
    waiting: PerEngine = 5,
    generation_tokens: PerEngine | None = None,
    prompt_tokens: PerEngine | None = None,
    iterations: PerEngine | None = None,
    *,
    model_name: str = "meta-llama/Llama-3.1-8B-Instruct",
    uptime_s: float = 6 * 3600.0,
    created: bool = True,
    process_metrics: bool = True,
    seed: int = 0,
) -> bytes:
    """One vLLM V1 exposition (UTF-8 bytes) for ``engines`` data-parallel engines ("0".."N-1").

    ``running``/``waiting`` are gauges; ``generation_tokens``/``prompt_tokens``/``iterations`` (the
    ``vllm:iteration_tokens_total_count`` heartbeat) counters, derived from ``uptime_s`` when None.
    ``created=False`` drops the ``*_created`` families and ``process_metrics=False`` the python/process
    collectors, as in Prometheus multiprocess mode (``--api-server-count > 1``).
    """
    if engines < 1:
        raise ValueError("engines must be >= 1")
    rng = random.Random(seed)
    start = 1.7959e9
    run = _per_engine(running, engines, "running") or []
    wait = _per_engine(waiting, engines, "waiting") or []
    steps = _per_engine(iterations, engines, "iterations") or [
        float(int(uptime_s * rng.uniform(18, 26))) for _ in range(engines)
    ]
    gen = _per_engine(generation_tokens, engines, "generation_tokens") or [
        float(int(s * rng.uniform(18, 22))) for s in steps
    ]
    prompt = _per_engine(prompt_tokens, engines, "prompt_tokens") or [float(int(g * rng.uniform(8, 10))) for g in gen]
    requests = [int(g / rng.uniform(300, 380)) for g in gen]
    base = [f'engine="{e}",model_name="{model_name}"' for e in range(engines)]
    out: list[str] = []
    w = out.append

    def family(name: str, typ: str, text: str) -> None:
        w(f"# HELP {name} {text}")
        w(f"# TYPE {name} {typ}")

    def created_family(name: str, text: str, label_sets: Sequence[str]) -> None:
        if created:
            family(f"{name}_created", "gauge", text)
            for labels in label_sets:
                w(f"{name}_created{{{labels}}} {_num(start + rng.uniform(0, 60))}")

    if process_metrics:
        for name, text in (
            ("python_gc_objects_collected_total", "Objects collected during gc"),
            ("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC"),
            ("python_gc_collections_total", "Number of times this generation was collected"),
        ):
            family(name, "counter", text)
            for g in range(3):
                w(f'{name}{{generation="{g}"}} {_num(float(rng.randrange(0, 10**7)))}')
        family("python_info", "gauge", "Python platform information")
        w('python_info{implementation="CPython",major="3",minor="12",patchlevel="12",version="3.12.12"} 1.0')
        for name, typ, value in (
            ("process_virtual_memory_bytes", "gauge", 2.0497596416e10),
            ("process_resident_memory_bytes", "gauge", 1.1891712e9),
            ("process_start_time_seconds", "gauge", start - 30.0),
            ("process_cpu_seconds_total", "counter", round(uptime_s * 0.36, 2)),
            ("process_open_fds", "gauge", 144.0),
            ("process_max_fds", "gauge", 1048576.0),
        ):
            family(name, typ, name.replace("_", " ") + ".")
            w(f"{name} {_num(value)}")

    def counters(specs: Sequence[tuple[str, str, str | None, Sequence[str]]], scale: float) -> None:
        for name, text, extra, values in specs:
            sets = [f'{b},{extra}="{v}"' for b in base for v in values] if extra else base
            family(f"{name}_total", "counter", text)
            for labels in sets:
                w(f"{name}_total{{{labels}}} {_num(float(int(scale * rng.random())))}")
            created_family(name, text, sets)

    counters(_COUNTERS, 0.0)
    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
    for e in range(engines):
        w(f"vllm:num_requests_running{{{base[e]}}} {_num(run[e])}")
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
    for e in range(engines):
        w(f"vllm:num_requests_waiting{{{base[e]}}} {_num(wait[e])}")
    family("vllm:num_requests_waiting_by_reason", "gauge", "Number of waiting requests by reason.")
    for e in range(engines):
        deferred = float(min(1, int(wait[e])))
        w(f'vllm:num_requests_waiting_by_reason{{{base[e]},reason="capacity"}} {_num(wait[e] - deferred)}')
        w(f'vllm:num_requests_waiting_by_reason{{{base[e]},reason="deferred"}} {_num(deferred)}')
    family("vllm:engine_sleep_state", "gauge", "Engine sleep state; awake = 1 means engine is awake.")
    for e in range(engines):
        for state, value in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
            w(f'vllm:engine_sleep_state{{{base[e]},sleep_state="{state}"}} {_num(value)}')
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
    for e in range(engines):
        w(f"vllm:kv_cache_usage_perc{{{base[e]}}} {_num(min(1.0, run[e] / 40 + rng.random() / 10))}")
    counters(_CACHE_COUNTERS, 1e8)

    def token_counter(name: str, text: str, values: Sequence[float]) -> None:
        family(f"{name}_total", "counter", text)
        for e in range(engines):
            w(f"{name}_total{{{base[e]}}} {_num(values[e])}")
        created_family(name, text, base)

    token_counter("vllm:prompt_tokens", "Number of prefill tokens processed.", prompt)
    counters([("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", "source",
               ("local_compute", "local_cache_hit", "external_kv_transfer"))], 5e7)  # fmt: skip
    counters([("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", None, ())], 3e7)
    counters([("vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by cache tier.", "source",
               ("device", "host", "p2p", "disk", "external_unspecified"))], 3e7)  # fmt: skip
    token_counter("vllm:generation_tokens", "Number of generation tokens processed.", gen)
    family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    reasons = ("stop", "length", "abort", "error", "repetition")
    success = [f'engine="{e}",finished_reason="{r}",model_name="{model_name}"' for e in range(engines) for r in reasons]
    for i, labels in enumerate(success):
        share = (0.86, 0.1, 0.035, 0.0004, 0.0004)[i % len(reasons)]
        w(f"vllm:request_success_total{{{labels}}} {_num(float(int(requests[i // len(reasons)] * share)))}")
    created_family("vllm:request_success", "Count of successfully processed requests.", success)
    family("vllm:admission_rejections_total", "counter", "Number of admission attempts rejected by a queue limit.")
    rejections = [f'model_name="{model_name}",reason="{r}"' for r in ("max_num_queued_reqs", "max_num_queued_tokens")]
    for labels in rejections:
        w(f"vllm:admission_rejections_total{{{labels}}} 0.0")
    created_family("vllm:admission_rejections", "Number of admission attempts rejected.", rejections)

    for name, text, bounds in _HISTOGRAMS:
        family(name, "histogram", text)
        for e in range(engines):
            total = steps[e] if name == "vllm:iteration_tokens_total" else float(requests[e])
            count = 0.0
            for i, bound in enumerate((*bounds, float("inf"))):
                count = total if bound == float("inf") else min(total, float(int(total * (i + 1) / (len(bounds) + 2))))
                labels = f'engine="{e}",le="{_num(float(bound))}",model_name="{model_name}"'
                w(f"{name}_bucket{{{labels}}} {_num(count)}")
            w(f"{name}_count{{{base[e]}}} {_num(count)}")
            w(f"{name}_sum{{{base[e]}}} {_num(total * rng.uniform(0.5, 40))}")
        created_family(name, text, base)

    family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    for e in range(engines):
        w(f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="{e}",'
          'gpu_memory_utilization="0.92",is_attention_free="False",kv_cache_dtype_skip_layers="[]",'
          'num_cpu_blocks="None",num_gpu_blocks="25640",num_gpu_blocks_override="None",'
          'prefix_caching_hash_algo="sha256",sliding_window="None"} 1.0')  # fmt: skip

    family("http_requests_total", "counter", "Total number of requests by method, status and handler.")
    http = [f'handler="{h}",method="{m}",status="{s}"' for h in _HANDLERS for m, s in (("GET", "2xx"), ("POST", "4xx"))]
    for labels in http:
        w(f"http_requests_total{{{labels}}} {_num(float(rng.randrange(10, 30000)))}")
    created_family("http_requests", "Total number of requests by method, status and handler.", http)
    for name in ("http_request_size_bytes", "http_response_size_bytes"):
        family(name, "summary", "Content length by handler. Only value of header is respected.")
        for h in _HANDLERS:
            w(f'{name}_count{{handler="{h}"}} {_num(float(rng.randrange(10, 30000)))}')
            w(f'{name}_sum{{handler="{h}"}} {_num(float(rng.randrange(0, 10**8)))}')
        created_family(name, "Content length by handler.", [f'handler="{h}"' for h in _HANDLERS])
    highr = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60)
    for name, label_sets, bounds in (
        ("http_request_duration_highr_seconds", [""], highr),
        ("http_request_duration_seconds", [f'handler="{h}",method="POST"' for h in _HANDLERS], (0.1, 0.5, 1)),
    ):
        family(name, "histogram", "Latency with only few buckets by handler.")
        for labels in label_sets:
            sep = "," if labels else ""
            total = float(rng.randrange(1000, 30000))
            for i, bound in enumerate((*bounds, float("inf"))):
                count = total if bound == float("inf") else float(int(total * (i + 1) / (len(bounds) + 1)))
                w(f'{name}_bucket{{{labels}{sep}le="{_num(float(bound))}"}} {_num(count)}')
            w(f"{name}_count{{{labels}}} {_num(total)}" if labels else f"{name}_count {_num(total)}")
            w(f"{name}_sum{{{labels}}} {_num(total * 0.7)}" if labels else f"{name}_sum {_num(total * 0.7)}")
        created_family(name, "Latency.", [labels for labels in label_sets if labels])
    return ("\n".join(out) + "\n").encode()
