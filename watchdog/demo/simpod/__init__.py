"""Simulated vLLM pods (``engine``: counters per mode; ``pod``: the exposition; ``sglang``: SGLang's instead;
``server``: HTTP; ``fleet``; ``__main__``): HTTP servers on loopback addresses serving vLLM V1-shaped (or,
with ``flavor="sglang"``, SGLang-shaped) ``/metrics`` and ``/health``. Loopback is the default and the rule on a host;
``SimPod(..., listen_any=True)`` (``python -m watchdog.demo.simpod --listen-any``) opts in to any address, for a
container whose pod IP lives in the pod's own network namespace (the node tier's simulated-engine image).

The exposition is produced by prometheus_client (as vLLM does), with vLLM V1 family names, types, HELP texts
and labels (``engine`` = data-parallel rank "0".."N-1", ``model_name``), including the ``*_created`` gauges.
Counters advance as a function of ``time.monotonic()``, so they rise between scrapes, not per scrape.

Modes (per engine except ``hang``, which follows engine 0; switch at runtime with :meth:`SimPod.set_mode`):

- ``progressing``: busy (running 20, waiting 2); prompt/generation tokens and the step histogram rise. ``idle``:
  running 0, waiting 0, every counter flat.
- ``prefill``: one long chunked prefill (running 1) as vLLM V1 exposes it: no step produces an output, so
  every token counter and ``vllm:iteration_tokens_total_count`` stay flat; only ``vllm:kv_cache_usage_perc``
  grows, one chunk of KV blocks per step - the case that must not be read as a wedge.
- ``sleeping``: vLLM sleep mode (``vllm:engine_sleep_state{sleep_state="awake"}`` 0) with requests still
  counted as running (21) and every counter flat - paused on purpose, never a wedge.
- ``wedged``: running 21 (``wedged_running``), every counter and gauge frozen; /health still 200.
- ``wedge_after``: progressing for ``wedge_after_s`` seconds after the mode was set, then wedged.
- ``hang``: the pod accepts connections and never answers (any path but ``/sim/*``), to test scrape deadlines.
Simulation-only control endpoints (not in vLLM): ``GET /sim/mode`` returns the state as JSON,
``POST /sim/mode?mode=wedged[&wedge_after=5]`` switches the mode (for pods running as separate processes).
"""

from watchdog.demo.simpod.engine import DEFAULT_MODEL, MODES, Rates
from watchdog.demo.simpod.fleet import SimFleet
from watchdog.demo.simpod.pod import SimPod

__all__ = ["DEFAULT_MODEL", "MODES", "Rates", "SimFleet", "SimPod"]
