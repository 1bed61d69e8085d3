"""One simulated vLLM pod: vLLM V1-shaped ``/metrics`` (produced by prometheus_client, as vLLM does) served
on a loopback address (or, opted in with ``listen_any``, on any address of a container's own network
namespace)."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from watchdog.demo.simpod.engine import (
    DEFAULT_MODEL,
    ITERATION_BUCKETS,
    MODES,
    TTFT_BUCKETS,
    EngineModel,
    Rates,
)
from watchdog.demo.simpod.server import SimHandler, SimServer
from watchdog.demo.simpod.sglang import sglang_families

FLAVORS = ("vllm", "sglang")  # whose exposition the pod serves


class SimPod:
    """One simulated vLLM pod: ``SimPod("127.0.0.2", 0, "progressing").start()`` returns its base URL.

    ``port=0`` picks a free port (read ``.port`` after start). ``engines`` > 1 emits one series per engine.
    ``flavor="sglang"`` serves SGLang's split series instead (:mod:`watchdog.demo.simpod.sglang`).
    Raises ValueError for a non-loopback address (unless ``listen_any``) or an unknown mode; OSError when the port
    is taken.

    ``listen_any=True`` is the one opt-in out of loopback: any address, ``0.0.0.0`` (every address of the network
    namespace) included. It exists for a container, where the pod IP lives inside the pod's own network
    namespace (the node tier's simulated-engine image, ``watchdog/demo/node/engine.py``); on a host, where
    the demo and the end-to-end tests run, the default (loopback only) stays.
    """

    def __init__(self, address: str = "127.0.0.2", port: int = 0, mode: str = "progressing", *,
                 engines: int = 1, model_name: str = DEFAULT_MODEL, wedge_after_s: float = 5.0,
                 running: int = 20, waiting: int = 2, wedged_running: int = 21, rates: Rates | None = None,
                 flavor: str = "vllm", listen_any: bool = False) -> None:
        if not listen_any and not ipaddress.ip_address(address).is_loopback:
            raise ValueError(f"simulated pods bind loopback addresses only (127.0.0.0/8), got {address!r} "
                             "(listen_any=True: inside a container's own network namespace only)")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if flavor not in FLAVORS:
            raise ValueError(f"unknown flavor {flavor!r}; expected one of {', '.join(FLAVORS)}")
        self.address, self.port, self.model_name, self.flavor = address, port, model_name, flavor
        self.running, self.waiting, self.wedged_running = running, waiting, wedged_running
        self.rates = rates or Rates()
        self._engines = [EngineModel(mode, time.monotonic(), wedge_after_s, rank) for rank in range(engines)]
        self._created = time.time()
        self._lock, self._stopping = threading.Lock(), threading.Event()
        self._server: SimServer | None = None
        self._thread: threading.Thread | None = None
        self.scrapes = 0  # /metrics requests answered

    @property
    def engines(self) -> list[EngineModel]:
        """The engines' models (one per data-parallel rank); read under the pod's lock only."""
        return self._engines

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def mode(self) -> str:
        """Mode of engine 0 as set (``wedge_after`` stays ``wedge_after``; see :meth:`effective_mode`)."""
        return self._engines[0].mode

    def effective_mode(self, engine: int = 0) -> str:
        return self._engines[engine].effective(time.monotonic())

    def set_mode(self, mode: str, *, wedge_after_s: float | None = None, engines: Sequence[int] | None = None) -> None:
        """Switch mode now (all engines, or the given ranks); counters keep what they accumulated so far."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        with self._lock:
            now = time.monotonic()
            for rank in range(len(self._engines)) if engines is None else engines:
                engine = self._engines[rank]
                engine.advance(now, self.rates)
                engine.mode, engine.since = mode, now
                engine.wedge_after_s = engine.wedge_after_s if wedge_after_s is None else wedge_after_s

    def keep_engines(self, count: int) -> None:
        """Stop exposing every engine past the first ``count`` (a data-parallel rank gone from ``/metrics`` while
        the others go on)."""
        with self._lock:
            del self._engines[max(1, count):]

    def exposition(self) -> bytes:
        """The /metrics body (Prometheus text format 0.0.4) as of now."""
        with self._lock:
            now = time.monotonic()
            for engine in self._engines:
                engine.advance(now, self.rates)
            families = self._families(now)
        return generate_latest(SimpleNamespace(collect=lambda: iter(families)))  # a Collector

    def _families(self, now: float) -> list[Metric]:
        if self.flavor == "sglang":
            return sglang_families(self, now)
        labels = ["engine", "model_name"]
        running_g = GaugeMetricFamily("vllm:num_requests_running", "Number of requests in model execution batches.",
                                      labels=labels)
        waiting_g = GaugeMetricFamily("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                      labels=labels)
        usage_g = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                                    labels=labels)
        sleep_g = GaugeMetricFamily(
            "vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means "
            "engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            labels=[*labels, "sleep_state"])
        by_reason = GaugeMetricFamily("vllm:num_requests_waiting_by_reason",
                                      "Number of waiting requests by reason.", labels=[*labels, "reason"])
        prompt = CounterMetricFamily("vllm:prompt_tokens", "Number of prefill tokens processed.", labels=labels)
        generation = CounterMetricFamily("vllm:generation_tokens", "Number of generation tokens processed.",
                                         labels=labels)
        success = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                      labels=["engine", "finished_reason", "model_name"])
        preemptions = CounterMetricFamily("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                          labels=labels)
        iteration = HistogramMetricFamily("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", labels=labels)
        ttft = HistogramMetricFamily("vllm:time_to_first_token_seconds",
                                     "Histogram of time to first token in seconds.", labels=labels)
        for rank, engine in enumerate(self._engines):
            values = [str(rank), self.model_name]
            mode = engine.effective(now)
            running, waiting = {
                "progressing": (self.running, self.waiting), "idle": (0, 0), "prefill": (1, 0),
            }.get(mode, (self.wedged_running, 0))
            running_g.add_metric(values, running)
            waiting_g.add_metric(values, waiting)
            usage_g.add_metric(values, engine.kv_cache_usage(mode))
            asleep = mode == "sleeping"
            for state, value in (("awake", not asleep), ("weights_offloaded", asleep), ("discard_all", False)):
                sleep_g.add_metric([*values, state], float(value))
            by_reason.add_metric([*values, "capacity"], waiting)
            by_reason.add_metric([*values, "deferred"], 0)
            prompt.add_metric(values, float(int(engine.prompt)), created=self._created)
            generation.add_metric(values, float(int(engine.generation)), created=self._created)
            finished = int(engine.requests)
            for reason, share in (("stop", finished - finished // 10), ("length", finished // 10), ("abort", 0)):
                success.add_metric([str(rank), reason, self.model_name], float(share), created=self._created)
            preemptions.add_metric(values, 3.0, created=self._created)
            cumulative, running_total = [], 0
            for bound, steps in zip(ITERATION_BUCKETS, engine.buckets, strict=True):
                running_total += int(steps)
                cumulative.append((str(float(bound)), float(running_total)))
            cumulative.append(("+Inf", float(running_total)))
            iteration.add_metric(values, cumulative, float(int(engine.iter_sum)))
            ttft_buckets = [(str(b), float(finished if b >= 0.25 else 0)) for b in TTFT_BUCKETS]
            ttft.add_metric(values, [*ttft_buckets, ("+Inf", float(finished))], round(0.2 * finished, 3))
            for family in (iteration, ttft):
                created = dict(zip(labels, values, strict=True))
                family.samples.append(Sample(family.name + "_created", created, self._created, None, None))
        help_start = "Start time of the process since unix epoch in seconds."
        start = GaugeMetricFamily("process_start_time_seconds", help_start, value=round(self._created, 2))
        rss = GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.", value=1.1891712e09)
        return [start, rss, running_g, waiting_g, usage_g, sleep_g, by_reason, prompt, generation, success, preemptions,
                iteration, ttft]

    def state(self) -> dict[str, Any]:
        """JSON-able state: address, port, per-engine mode and effective mode, scrapes."""
        return {"address": self.address, "port": self.port, "scrapes": self.scrapes, "engines": [
            {"mode": e.mode, "effective": e.effective(time.monotonic())} for e in self._engines]}

    def start(self) -> str:
        """Bind and serve in a daemon thread; return the base URL (``http://ADDRESS:PORT``)."""
        server = SimServer((self.address, self.port), SimHandler)
        server.pod = self
        self._server, self.port = server, int(server.server_address[1])
        self._stopping.clear()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"simpod-{self.address}:{self.port}", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving; hung requests are released (their connections closed unanswered)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> SimPod:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
