"""Ground truth per engine and the ``/metrics`` it serves, in the real profiles' series (vLLM, SGLang, llama.cpp,
TRT-LLM).

An :class:`Engine` is a list of phases (start time, behaviour). Behaviours:

- ``progressing``: requests running, every progress signal moving;
- ``idle``: nothing running, nothing moving (never stalled);
- ``prefill``: one long prefill: requests running, no token out, but the KV-cache gauge grows chunk by chunk;
- ``sleep`` / ``rl_update``: paused on purpose (vLLM's sleep or RL weight update gauges > 0), nothing moving;
- ``wedged``: requests running and nothing moves (the engine is hung): the only behaviour the watchdog may remove a
  pod for (or, from a hostile tenant, ``frozen``: the exposition itself frozen while busy: indistinguishable, the
  tenant's own pods only);
- ``unreachable``: /metrics does not answer (unknown, never evidence);
- ``restart``: the process restarted at the phase start: counters start again from zero (progressing after);
- ``rewedged``: the process restarted at the phase start and hangs again at once (a poisoned request replayed):
  counters from zero, nothing moving; a new wedge, which begins at the restart (the old one ended with its process).

Counters integrate the rates over the phases; ``render`` prints the exposition text the real engine would.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

BEHAVIOURS = ("progressing", "idle", "prefill", "sleep", "rl_update", "wedged", "unreachable", "restart")
#: Behaviours in which an engine is hung (what may justify a removal).
WEDGED = ("wedged", "rewedged")
#: Phases that start a new process (the container's restartCount goes up; counters start from zero).
RESTARTS = ("restart", "rewedged")


@dataclass
class Engine:
    """One engine's truth: ``phases`` sorted by start; ``rate`` tokens/s while progressing."""

    phases: list[tuple[float, str]]
    rate: float = 37.0
    frozen_from: float | None = None  # hostile: the exposition stops changing from here (kept busy)
    _starts: list[float] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.phases.sort()
        self._starts = [s for s, _ in self.phases]

    def behaviour(self, t: float) -> str:
        i = bisect.bisect_right(self._starts, t) - 1
        kind = self.phases[max(i, 0)][1]
        return {"restart": "progressing", "rewedged": "wedged"}.get(kind, kind)

    def wedged_since(self, t: float) -> float | None:
        """When the wedge going on at ``t`` began (None: not wedged at ``t``), unreachable phases right before it
        included (no counter moves while unreachable: the same values before and after prove no progress). A frozen
        exposition counts from the moment it froze (for the safety oracle: the tenant made its own pod look hung)."""
        if self.frozen_from is not None and t >= self.frozen_from:
            before = self._wedged_since(self.frozen_from)  # frozen in a wedge: flat since the wedge began
            return self.frozen_from if before is None else before
        return self._wedged_since(t)

    def visibly_wedged_since(self, t: float) -> float | None:
        """When the wedge at ``t`` began as the watchdog can see it: its wedged phase alone (after an unreachable
        gap the engine's series may have been forgotten; the stall is seen afresh from the gap's end)."""
        if self.frozen_from is not None and t >= self.frozen_from:
            return self.wedged_since(t)
        i = bisect.bisect_right(self._starts, t) - 1
        return self.phases[i][0] if i >= 0 and self.phases[i][1] in WEDGED else None

    def reachable_since(self, t: float) -> float | None:
        """Since when /metrics answers without a gap up to ``t`` (None: unreachable at ``t``); this engine speaks for
        its pod (rank 0 serves the pod's /metrics)."""
        if self.frozen_from is None and self.behaviour(t) == "unreachable":
            return None
        gaps = [self.phases[i + 1][0] for i, (s, kind) in enumerate(self.phases[:-1])
                if kind == "unreachable" and self.phases[i + 1][0] <= t]
        return max(gaps) if gaps and self.frozen_from is None else self.phases[0][0]

    def _wedged_since(self, t: float) -> float | None:
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0 or self.phases[i][1] not in WEDGED:
            return None
        while i > 0 and self.phases[i][1] != "rewedged" and self.phases[i - 1][1] in (*WEDGED, "unreachable"):
            i -= 1  # nothing moves while /metrics is unreachable either: the counters read after it prove it
        return self.phases[i][0]

    def restarts(self, t: float) -> int:
        return sum(1 for s, kind in self.phases if kind in RESTARTS and s <= t)

    def values(self, t: float) -> dict[str, float]:
        """The engine's series at ``t`` (frozen expositions: at the moment they froze)."""
        if self.frozen_from is not None and t >= self.frozen_from:
            out = self._values(self.frozen_from)
            out["running"] = max(out["running"], 7.0)
            return out
        return self._values(t)

    def _values(self, t: float) -> dict[str, float]:
        gen = prefill = 0.0
        for i, (start, kind) in enumerate(self.phases):
            if start > t:
                break
            end = min(t, self.phases[i + 1][0]) if i + 1 < len(self.phases) else t
            if kind in RESTARTS:
                gen = prefill = 0.0
                kind = "progressing" if kind == "restart" else "wedged"
            if kind == "progressing":
                gen += self.rate * (end - start)
            elif kind == "prefill":
                prefill += end - start
        kind = self.behaviour(t)
        running = {"progressing": 12.0, "idle": 0.0, "prefill": 1.0, "sleep": 3.0, "rl_update": 5.0,
                   "wedged": 21.0}.get(kind, 0.0)
        return {"running": running, "waiting": 2.0 if running else 0.0, "gen": gen, "iter": gen / 8.0,
                "rt": gen + 50.0 * prefill, "kv": min(0.99, 0.1 + prefill / 10000.0 + (gen % 1000.0) / 2000.0),
                "prompt": gen * 3.0,
                "success": gen / 100.0, "sleep": 1.0 if kind == "sleep" else 0.0,
                "rl": 1.0 if kind == "rl_update" else 0.0, "awake": 0.0 if kind == "sleep" else 1.0}


def _line(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value!r}" if inner else f"{name} {value!r}"


def render(profile: str, engines: list[Engine], t: float, *, model: str = "m", extra: int = 0) -> bytes:
    """The exposition of a pod whose engines are ``engines`` (data-parallel ranks), as the engine ``profile``
    prints it; ``extra``: invented engine series a hostile tenant adds."""
    out: list[str] = []
    for rank, engine in enumerate(engines):
        out += _RENDER[profile](engine.values(t), str(rank), model)
    for i in range(extra):
        out += _RENDER[profile]({k: float(i) for k in _KEYS}, f"x{i}", f"invented{i}")
    return ("\n".join(out) + "\n").encode()


_KEYS = ("running", "waiting", "gen", "rt", "iter", "kv", "prompt", "success", "sleep", "rl", "awake")


def _vllm(v: dict[str, float], rank: str, model: str) -> list[str]:
    e = {"engine": rank, "model_name": model}
    return [
        _line("vllm:num_requests_running", e, v["running"]), _line("vllm:num_requests_waiting", e, v["waiting"]),
        _line("vllm:generation_tokens_total", e, v["gen"]), _line("vllm:iteration_tokens_total_count", e, v["iter"]),
        _line("vllm:kv_cache_usage_perc", e, v["kv"]), _line("vllm:prompt_tokens_total", e, v["prompt"]),
        _line("vllm:request_success_total", e, v["success"]),
        _line("vllm:sleep_mode_operations_in_flight", e, v["sleep"]),
        _line("vllm:rl_weight_update_operations_in_flight", e, v["rl"]),
        _line("vllm:engine_sleep_state", {**e, "sleep_state": "awake"}, v["awake"]),
    ]


def _sglang(v: dict[str, float], rank: str, model: str) -> list[str]:
    e = {"dp_rank": rank, "engine_type": "unified", "model_name": model}
    return [
        _line("sglang:num_running_reqs", e, v["running"]), _line("sglang:num_queue_reqs", e, v["waiting"]),
        _line("sglang:realtime_tokens_total", e, v["rt"]), _line("sglang:cuda_graph_passes_total", e, v["iter"]),
        _line("sglang:generation_tokens_total", e, v["success"]),
    ]


def _llamacpp(v: dict[str, float], rank: str, model: str) -> list[str]:
    return [
        _line("llamacpp:requests_processing", {}, v["running"]), _line("llamacpp:requests_deferred", {}, v["waiting"]),
        _line("llamacpp:n_decode_total", {}, v["iter"]), _line("llamacpp:tokens_predicted_total", {}, v["success"]),
        _line("llamacpp:prompt_tokens_total", {}, v["prompt"]),
    ] if rank in ("0", "x0") else []


def _trtllm(v: dict[str, float], rank: str, model: str) -> list[str]:
    e = {"engine_type": "trtllm", "model_name": model if rank == "0" else f"{model}-{rank}"}
    return [
        _line("trtllm_num_requests_running", e, v["running"]), _line("trtllm_num_requests_waiting", e, v["waiting"]),
        _line("trtllm_generation_tokens_total", e, v["gen"]), _line("trtllm_prompt_tokens_total", e, v["prompt"]),
    ]


_RENDER = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp, "trtllm": _trtllm}
#: Behaviours each engine kind can show (only vLLM exports the pause gauges: a paused SGLang engine would be hung).
CAN = {"vllm": BEHAVIOURS, "sglang": ("progressing", "idle", "prefill", "wedged", "unreachable", "restart"),
       "llamacpp": ("progressing", "idle", "wedged", "unreachable", "restart"),
       "trtllm": ("progressing", "idle", "wedged", "unreachable", "restart")}
