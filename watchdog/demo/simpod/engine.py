"""The counters of one simulated vLLM engine (one data-parallel rank) and how they advance per mode."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("progressing", "idle", "prefill", "sleeping", "wedged", "wedge_after", "hang")
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # vLLM V1 defaults
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
PREFILL_CHUNK = 2048  # tokens per step during a long chunked prefill
KV_BLOCKS = 40_000  # KV-cache blocks of 16 tokens: one prefill chunk takes PREFILL_CHUNK / 16 of them


@dataclass
class Rates:
    """Rates of a progressing engine, per second of time.monotonic()."""
    prompt_tokens: float = 1200.0
    generation_tokens: float = 400.0
    steps: float = 40.0  # engine steps (iteration heartbeat) per second
    requests: float = 2.0  # finished requests per second
    prefill_steps: float = 10.0  # steps per second in "prefill" mode, PREFILL_CHUNK tokens each


class EngineModel:
    """Accumulated counters of one engine (one data-parallel rank). Not thread-safe: SimPod holds a lock."""

    def __init__(self, mode: str, now: float, wedge_after_s: float, rank: int) -> None:
        self.mode, self.since, self.wedge_after_s, self.last = mode, now, wedge_after_s, now
        # A warm start, as if the pod had served for a while (large values exercise number formatting).
        self.prompt = 1_234_567.0 + 1000 * rank
        self.generation = 456_789.0 + 100 * rank
        self.buckets = [0.0] * len(ITERATION_BUCKETS)  # steps per bucket (not cumulative)
        self.buckets[ITERATION_BUCKETS.index(64)] = 30_000.0
        self.buckets[ITERATION_BUCKETS.index(PREFILL_CHUNK)] = 200.0
        self.iter_sum = 30_000 * 40.0 + 200 * PREFILL_CHUNK
        self.requests = 5_000.0
        self.prefill_steps = 0.0  # steps of the current long prefill (its KV blocks grow chunk by chunk)

    def effective(self, at: float) -> str:
        if self.mode == "wedge_after":
            return "progressing" if at < self.since + self.wedge_after_s else "wedged"
        return self.mode

    def advance(self, now: float, rates: Rates) -> None:
        """Accumulate from ``self.last`` to ``now``, splitting at the wedge_after switch."""
        start = self.last
        if self.mode == "wedge_after":
            switch = self.since + self.wedge_after_s
            if start < switch:
                self._apply("progressing", min(now, switch) - start, rates)
        else:
            self._apply(self.mode, now - start, rates)
        self.last = max(now, start)

    def _apply(self, mode: str, dt: float, rates: Rates) -> None:
        if dt <= 0:
            return
        if mode == "progressing":
            prompt, gen, steps = rates.prompt_tokens * dt, rates.generation_tokens * dt, rates.steps * dt
            self.prompt += prompt
            self.generation += gen
            per_step = (prompt + gen) / steps if steps else 0.0
            self.buckets[_bucket_index(per_step)] += steps
            self.iter_sum += prompt + gen
            self.requests += rates.requests * dt
        elif mode == "prefill":
            # vLLM V1: a step without request outputs observes no token counter and no iteration histogram
            # sample; only the scheduler's KV-cache usage moves, one chunk of blocks per step.
            self.prefill_steps += rates.prefill_steps * dt

    def kv_cache_usage(self, mode: str) -> float:
        """The ``vllm:kv_cache_usage_perc`` gauge in ``mode`` (a long prefill's blocks wrap at 90 %)."""
        if mode == "prefill":
            blocks = int(self.prefill_steps) * (PREFILL_CHUNK // 16) % int(0.9 * KV_BLOCKS)
            return round(0.01 + blocks / KV_BLOCKS, 6)
        return {"progressing": 0.35, "idle": 0.0}.get(mode, 0.42)


def _bucket_index(value: float) -> int:
    for i, bound in enumerate(ITERATION_BUCKETS):
        if value <= bound:
            return i
    return len(ITERATION_BUCKETS) - 1
