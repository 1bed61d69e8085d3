"""Simulated vLLM pods: HTTP servers on loopback addresses serving vLLM V1-shaped ``/metrics`` and ``/health``.

The exposition is produced by prometheus_client (as vLLM does), with vLLM V1 family names, types, HELP texts
and labels (``engine`` = data-parallel rank "0".."N-1", ``model_name``), including the ``*_created`` gauges.
Counters advance as a function of ``time.monotonic()``, so they rise between scrapes, not per scrape.

Modes (per engine except ``hang``, which follows engine 0; switch at runtime with :meth:`SimPod.set_mode`):

- ``progressing``: busy (running 20, waiting 2); prompt/generation tokens and the heartbeat rise. ``idle``:
  running 0, waiting 0, every counter flat.
- ``prefill``: one long prefill (running 1): prompt/generation flat, ``vllm:iteration_tokens_total_count``
  (the per-step heartbeat) rises - the V1 long-prefill case that must not be read as a wedge.
- ``wedged``: running 21 (``wedged_running``), every counter incl. the heartbeat frozen; /health still 200.
- ``wedge_after``: progressing for ``wedge_after_s`` seconds after the mode was set, then wedged.
- ``hang``: the pod accepts connections and never answers (any path but ``/sim/*``), to test scrape deadlines.
Simulation-only control endpoints (not in vLLM): ``GET /sim/mode`` returns the state as JSON,
``POST /sim/mode?mode=wedged[&wedge_after=5]`` switches the mode (for pods running as separate processes).
"""

from __future__ import annotations

import argparse
import gzip
import ipaddress
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

MODES = ("progressing", "idle", "prefill", "wedged", "wedge_after", "hang")
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # vLLM V1 defaults
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
PREFILL_CHUNK = 2048  # tokens per step during a long chunked prefill


@dataclass
class Rates:
    """Rates of a progressing engine, per second of time.monotonic()."""
    prompt_tokens: float = 1200.0
    generation_tokens: float = 400.0
    steps: float = 40.0  # engine steps (iteration heartbeat) per second
    requests: float = 2.0  # finished requests per second
    prefill_steps: float = 10.0  # steps per second in "prefill" mode, PREFILL_CHUNK tokens each


class _Engine:
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
            steps = rates.prefill_steps * dt
            self.buckets[ITERATION_BUCKETS.index(PREFILL_CHUNK)] += steps
            self.iter_sum += steps * PREFILL_CHUNK


def _bucket_index(value: float) -> int:
    for i, bound in enumerate(ITERATION_BUCKETS):
        if value <= bound:
            return i
    return len(ITERATION_BUCKETS) - 1


class SimPod:
    """One simulated vLLM pod: ``SimPod("127.0.0.2", 0, "progressing").start()`` returns its base URL.

    ``port=0`` picks a free port (read ``.port`` after start). ``engines`` > 1 emits one series per engine.
    Raises ValueError for a non-loopback address or an unknown mode; OSError when the port is taken.
    """

    def __init__(self, address: str = "127.0.0.2", port: int = 0, mode: str = "progressing", *,
                 engines: int = 1, model_name: str = DEFAULT_MODEL, wedge_after_s: float = 5.0,
                 running: int = 20, waiting: int = 2, wedged_running: int = 21, rates: Rates | None = None) -> None:
        if not ipaddress.ip_address(address).is_loopback:
            raise ValueError(f"simulated pods bind loopback addresses only (127.0.0.0/8), got {address!r}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        self.address, self.port, self.model_name = address, port, model_name
        self.running, self.waiting, self.wedged_running = running, waiting, wedged_running
        self.rates = rates or Rates()
        self._engines = [_Engine(mode, time.monotonic(), wedge_after_s, rank) for rank in range(engines)]
        self._created = time.time()
        self._lock, self._stopping = threading.Lock(), threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.scrapes = 0  # /metrics requests answered

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

    def exposition(self) -> bytes:
        """The /metrics body (Prometheus text format 0.0.4) as of now."""
        with self._lock:
            now = time.monotonic()
            for engine in self._engines:
                engine.advance(now, self.rates)
            families = self._families(now)
        return generate_latest(SimpleNamespace(collect=lambda: iter(families)))  # a Collector

    def _families(self, now: float) -> list[Metric]:
        labels = ["engine", "model_name"]
        running_g = GaugeMetricFamily("vllm:num_requests_running", "Number of requests in model execution batches.",
                                      labels=labels)
        waiting_g = GaugeMetricFamily("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                      labels=labels)
        usage_g = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                                    labels=labels)
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
            running, waiting, usage = {
                "progressing": (self.running, self.waiting, 0.35), "idle": (0, 0, 0.0), "prefill": (1, 0, 0.08),
            }.get(mode, (self.wedged_running, 0, 0.42))
            running_g.add_metric(values, running)
            waiting_g.add_metric(values, waiting)
            usage_g.add_metric(values, usage)
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
        return [start, rss, running_g, waiting_g, usage_g, by_reason, prompt, generation, success, preemptions,
                iteration, ttft]

    def state(self) -> dict[str, Any]:
        """JSON-able state: address, port, per-engine mode and effective mode, scrapes."""
        return {"address": self.address, "port": self.port, "scrapes": self.scrapes, "engines": [
            {"mode": e.mode, "effective": e.effective(time.monotonic())} for e in self._engines]}

    def start(self) -> str:
        """Bind and serve in a daemon thread; return the base URL (``http://ADDRESS:PORT``)."""
        server = _Server((self.address, self.port), _Handler)
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


class _Server(ThreadingHTTPServer):
    daemon_threads, block_on_close = True, False
    pod: SimPod

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients that hang up are not news
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like uvicorn
    timeout = 10  # idle keep-alive connections are dropped after this many seconds
    server_version, sys_version = "uvicorn", ""

    def log_message(self, *_: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        gzipped = "gzip" in self.headers.get("Accept-Encoding", "") and len(body) > 0
        if gzipped:
            body = gzip.compress(body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        self.wfile.write(body)

    def _hung(self) -> bool:
        """In "hang" mode (any path but /sim/*), hold the request unanswered until the mode changes; True if so."""
        pod: SimPod = self.server.pod  # type: ignore[attr-defined]
        if pod.mode != "hang" or urlsplit(self.path).path.startswith("/sim/"):
            return False
        while pod.mode == "hang" and not pod._stopping.wait(0.05):
            pass
        self.close_connection = True
        return True

    def do_other(self) -> None:
        if not self._hung():
            self._send(405, b'{"detail":"Method Not Allowed"}', "application/json")

    do_DELETE = do_PUT = do_PATCH = do_other

    def do_GET(self) -> None:
        pod: SimPod = self.server.pod  # type: ignore[attr-defined]
        path = urlsplit(self.path).path
        if self._hung():
            return
        if path == "/metrics":
            body = pod.exposition()
            pod.scrapes += 1
            self._send(200, body, CONTENT_TYPE_PLAIN_0_0_4)
        elif path == "/health":
            self._send(200, b"", "application/json")
        elif path == "/sim/mode":
            self._send(200, json.dumps(pod.state()).encode(), "application/json")
        else:
            self._send(404, b'{"detail":"Not Found"}', "application/json")

    def do_POST(self) -> None:
        pod: SimPod = self.server.pod  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._hung():
            return
        if url.path != "/sim/mode":
            self._send(404, b'{"detail":"Not Found"}', "application/json")
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            after = float(query["wedge_after"]) if "wedge_after" in query else None
            pod.set_mode(query.get("mode", ""), wedge_after_s=after)
        except ValueError as e:
            self._send(400, json.dumps({"detail": str(e)}).encode(), "application/json")
            return
        self._send(200, json.dumps(pod.state()).encode(), "application/json")


class SimFleet:
    """Several SimPods on consecutive loopback addresses: ``SimFleet(["progressing", "wedged"])`` puts pod i
    on 127.0.0.(2+i). ``port=0`` gives each pod its own free port; a fixed port is shared by all addresses.
    Extra keyword arguments go to every :class:`SimPod`.
    """

    def __init__(self, modes: Sequence[str], *, port: int = 0, first_address: str = "127.0.0.2", **pod_kwargs: Any):
        first = ipaddress.IPv4Address(first_address)
        self.pods = [SimPod(str(first + i), port, mode, **pod_kwargs) for i, mode in enumerate(modes)]

    def start(self) -> list[str]:
        """Start every pod; on a failure the already started ones are stopped and the error re-raised."""
        try:
            return [pod.start() for pod in self.pods]
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop()

    def __enter__(self) -> SimFleet:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[SimPod]:
        return iter(self.pods)


def main(argv: list[str] | None = None) -> int:
    """``python -m watchdog.demo.simpod --address 127.0.0.2 --port 8000 --mode wedge_after --wedge-after 5``."""
    parser = argparse.ArgumentParser(prog="python -m watchdog.demo.simpod",
                                     description="Serve a simulated vLLM pod's /metrics and /health on loopback.")
    parser.add_argument("--address", default="127.0.0.2", help="loopback address to bind (127.0.0.0/8)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed)")
    parser.add_argument("--mode", choices=MODES, default="progressing")
    parser.add_argument("--wedge-after", type=float, default=5.0, help="seconds of progress before wedging")
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines (series per engine)")
    parser.add_argument("--model-name", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    pod = SimPod(args.address, args.port, args.mode, engines=args.engines, model_name=args.model_name,
                 wedge_after_s=args.wedge_after)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"simpod listening on {pod.start()} mode={args.mode}", flush=True)
    while not stop.wait(0.5):
        pass
    pod.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
