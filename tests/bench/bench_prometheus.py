"""`source: prometheus` vs direct scraping (a script, not a test): the watchdog's CPU per cycle and peak RSS as
the number of engine series grows, and what the queries cost Prometheus.

    python tests/bench/bench_prometheus.py [--series 1000,10000,30000] [--served 30000,100000]
                                          [--engines-per-pod 50] [--cycles 5] [--prometheus BINARY]

The world, all on loopback and in separate processes so that only the watchdog's own work is counted:

- one pod-server process (``fleet_server.py``'s asyncio server) serving ``series / engines-per-pod`` pods on
  127.11.x.y, each with ``--engines-per-pod`` data-parallel engines (many engine series per target). The bodies
  are LEAN: per engine only the series the `vllm` profile reads (running, waiting, waiting by reason, KV-cache
  usage, sleep state, prompt/generation tokens, finished requests, the iteration histogram's count and sum),
  about 17 lines, so that the Prometheus below can ingest 10,000 engines on a shared 2-core machine. A real vLLM
  engine prints about 690 lines (``expositions.py``; ``bench_fleet.py`` measures the direct scraper on those):
  the direct-scrape figures here are therefore a LOWER bound of its real cost, the Prometheus figures are not
  (the watchdog receives only the series its queries select, whatever else the pods print). Counters rise
  once a second;
- for the ``--series`` sizes, a real Prometheus (``--prometheus``, Debian's ``/usr/bin/prometheus`` by default;
  the tier's Prometheus 3.x works too) scraping every pod every ``--prom-interval`` s through file_sd, with the
  ``namespace`` and ``pod`` labels Kubernetes SD would add. Its side per watchdog cycle: the seconds its query
  engine spent on the cycle's queries (``prometheus_engine_query_duration_seconds_sum``, the slices that run a
  query) and its process CPU (scraping included);
- for the ``--served`` sizes, no Prometheus: a process answering the watchdog's queries as that Prometheus would
  (``ServedAnswers``: one row per pod and engine of the pods a query's matchers select, the lean bodies' values,
  counters rising per scrape interval). The watchdog's side is measured against an answer of the real size;
  Prometheus' side is NOT A MEASUREMENT (a Prometheus holding 100,000 engine series, ~3 million samples per
  scrape with real bodies, does not fit this shared 2-core machine);
- the Kubernetes API emulator (``fleet_emulator.py``, not a cluster) seeded with the pods (~1 KiB objects);
- the watchdog: a fresh process per (source, size) that builds ``build(config, KubeClient...)`` with
  production settings but ``--interval`` and the rails lifted, runs one warm-up cycle and ``--cycles`` measured
  cycles on a fixed grid; CPU per cycle = ``time.process_time`` of the measured cycles / cycles; RSS = peak
  ``ru_maxrss`` of that process.

Goals with `source: prometheus` (GOALS): 10,000 engine series < 0.5 s CPU per cycle and < 120 MiB; 30,000
every pod read every cycle and <= 1 s; 100,000 <= 2 s and <= 400 MiB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

from bench.bench_fleet import IMAGE_ENV, NAMESPACES, PodPlan, Processes, Seeder, start_emulator

HERE = Path(__file__).resolve()
# The watchdog's goals with source: prometheus, per engine series: (CPU s per cycle, peak RSS MiB).
GOALS = {10_000: (0.5, 120.0), 30_000: (1.0, 400.0), 100_000: (2.0, 400.0)}
GOALS_TEXT = "; ".join(f"{n:,}: <= {c:g} s, <= {r:g} MiB" for n, (c, r) in GOALS.items())
PROMETHEUS_BINARY = "/usr/bin/prometheus"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


# -- lean bodies, served by fleet_server.py's asyncio server ----------------------------------------------------
def lean_exposition(engines: int, running: float, values: dict[str, list[float]]) -> bytes:
    """The `vllm` profile's series only, for ``engines`` engines (values per engine as fleet_server gives them)."""
    keys = [f'engine="{e}",model_name="{MODEL}"' for e in range(engines)]
    out: list[str] = []

    def family(name: str, typ: str, lines: list[str]) -> None:
        out.append(f"# HELP {name} {name}.\n# TYPE {name} {typ}\n")
        out.extend(lines)

    waiting = 5.0 if running == 20 else 0.0
    family("vllm:num_requests_running", "gauge", [f"vllm:num_requests_running{{{k}}} {running}\n" for k in keys])
    family("vllm:num_requests_waiting", "gauge", [f"vllm:num_requests_waiting{{{k}}} {waiting}\n" for k in keys])
    family("vllm:num_requests_waiting_by_reason", "gauge",
           [f'vllm:num_requests_waiting_by_reason{{{k},reason="{r}"}} {waiting if r == "capacity" else 0.0}\n'
            for k in keys for r in ("capacity", "deferred")])
    family("vllm:kv_cache_usage_perc", "gauge", [f"vllm:kv_cache_usage_perc{{{k}}} 0.35\n" for k in keys])
    family("vllm:engine_sleep_state", "gauge",
           [f'vllm:engine_sleep_state{{{k},sleep_state="{s}"}} {1.0 if s == "awake" else 0.0}\n'
            for k in keys for s in ("awake", "weights_offloaded", "discard_all")])
    for name, source in (("vllm:prompt_tokens", "prompt_tokens"), ("vllm:generation_tokens", "generation_tokens")):
        family(name, "counter", [f"{name}_total{{{k}}} {values[source][e]}\n" for e, k in enumerate(keys)])
    family("vllm:request_success", "counter",
           [f'vllm:request_success_total{{engine="{e}",finished_reason="{r}",model_name="{MODEL}"}} '
            f"{values['iterations'][e] // 100 if r == 'stop' else 0.0}\n"
            for e in range(engines) for r in ("stop", "length", "abort")])
    family("vllm:iteration_tokens_total", "histogram",
           [line for e, k in enumerate(keys) for line in (
               f'vllm:iteration_tokens_total_bucket{{{k},le="+Inf"}} {values["iterations"][e]}\n',
               f"vllm:iteration_tokens_total_count{{{k}}} {values['iterations'][e]}\n",
               f"vllm:iteration_tokens_total_sum{{{k}}} {values['iterations'][e] * 40}\n")])
    return "".join(out).encode()


def serve_pods(spec_path: str) -> int:
    """The pod-server child: fleet_server.py with lean bodies."""
    import asyncio
    import gzip

    from bench import fleet_server

    def build(cls: type, engines: int, running: float, values: dict[str, list[float]]) -> Any:
        body = lean_exposition(engines, running, values)
        return cls(fleet_server.response(b"200 OK", body, fleet_server.CONTENT_TYPE, False),
                   fleet_server.response(b"200 OK", gzip.compress(body), fleet_server.CONTENT_TYPE, True))

    fleet_server.Exposition.build = classmethod(build)  # type: ignore[method-assign,assignment]
    asyncio.run(fleet_server.serve(json.loads(Path(spec_path).read_text())))
    return 0


# -- a served answer: what Prometheus answers at a size this machine cannot run it at ------------------------------
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)"((?:[^"\\]|\\.)*)"')
# The values of the lean bodies above, per metric (a counter: base + rate x the scrape time); others have no series.
_GAUGES = {"vllm:num_requests_running": 20.0, "vllm:num_requests_waiting": 5.0,
           "vllm:num_requests_waiting_by_reason": 0.0, "vllm:kv_cache_usage_perc": 0.35, "vllm:engine_sleep_state": 1.0}
_COUNTERS = {"vllm:generation_tokens_total": 400.0, "vllm:prompt_tokens_total": 1200.0,
             "vllm:iteration_tokens_total_count": 40.0, "vllm:request_success_total": 0.4}


class ServedAnswers:
    """Answers ``/api/v1/query`` as the real Prometheus of this benchmark would for ``pods`` ([namespace, name,
    address, port, engines]) scraped every ``interval`` s: the rows of the watchdog's queries (a slot's, the time
    query's, ``up``'s), selected by their namespace and pod matchers (``=``, ``=~`` of names, ``!=""``), one per
    pod and engine, with the labels Prometheus' aggregations keep (namespace, pod, instance, the engine labels and
    the selector's equality matchers) and the lean bodies' values. The design is measured against it; Prometheus'
    own side is not (no Prometheus runs)."""

    def __init__(self, pods: list[list[Any]], interval: float) -> None:
        self.interval = interval
        self._cache: dict[str, tuple[list[str], str | tuple[list[float], float]]] = {}
        self.pods: dict[tuple[str, str], tuple[str, int]] = {}
        for namespace, name, address, port, engines in pods:
            labels = f'"namespace":"{namespace}","pod":"{name}","instance":"{address}:{port}"'
            self.pods[(namespace, name)] = (labels, int(engines))

    def select(self, matchers: list[tuple[str, str, str]]) -> list[tuple[str, int, int]]:
        """(pod labels, engines, pod index) of the pods the matchers select."""
        namespace = next((v for n, op, v in matchers if n == "namespace" and op == "="), None)
        names: set[str] | None = None
        for label, op, value in matchers:
            if label == "pod" and op == "=":
                names = {value}
            elif label == "pod" and op == "=~":
                names = set(value.replace("\\", "").split("|"))
        return [(labels, engines, index) for index, ((ns, name), (labels, engines)) in enumerate(self.pods.items())
                if (namespace is None or ns == namespace) and (names is None or name in names)]

    def answer(self, query: str, at: float) -> bytes:
        heads, value = self._rows(query)
        tick = math.floor(at / self.interval) * self.interval
        now = f"{at:.3f}"
        if isinstance(value, str):
            tail = f',"{tick:.3f}"]}}' if value == "time" else f',"{value}"]}}'
            rows = [head + now + tail for head in heads]
        else:
            base, rate = value
            rows = [f'{head}{now},"{start + rate * tick:.1f}"]}}' for head, start in zip(heads, base, strict=True)]
        return ('{"status":"success","data":{"resultType":"vector","result":[' + ",".join(rows) + "]}}").encode()

    def _rows(self, query: str) -> tuple[list[str], str | tuple[list[float], float]]:
        """The rows of ``query`` up to their value (made once per query text: the watchdog sends the same ones
        every cycle), and what their value is: a constant, "time" (the scrape time), or (bases, rate) counters."""
        cached = self._cache.get(query)
        if cached is not None:
            return cached
        matchers = [(m.group(1), m.group(2), m.group(3)) for m in _MATCHER.finditer(query)]
        pods = self.select(matchers)
        value: str | tuple[list[float], float] = ""
        heads: list[str] = []
        if "timestamp(" in query:
            heads = [f'{{"metric":{{{labels},{self._engine(e)}}},"value":[' for labels, engines, _ in pods
                     for e in range(engines)]
            value = "time"
        elif "(up{" in query:
            heads = [f'{{"metric":{{{labels}}},"value":[' for labels, _, _ in pods]
            value = "1"
        else:
            metric = re.search(r"last_over_time\(([a-zA-Z_:][a-zA-Z0-9_:]*)", query)
            name = metric.group(1) if metric else ""
            extra = "".join(f',"{n}":"{v}"' for n, op, v in matchers if op == "=" and n not in ("namespace", "pod"))
            if name in _GAUGES or name in _COUNTERS:
                heads = [f'{{"metric":{{{labels},{self._engine(e)}{extra}}},"value":[' for labels, engines, _ in pods
                         for e in range(engines)]
            if name in _GAUGES:
                value = "0.0" if 'reason="deferred"' in query else str(_GAUGES[name])
            elif name in _COUNTERS:
                value = ([1e6 + 1000 * (index % 97) + e for _, engines, index in pods for e in range(engines)],
                         _COUNTERS[name])
        self._cache[query] = heads, value
        return heads, value

    @staticmethod
    def _engine(e: int) -> str:
        return f'"engine":"{e}","model_name":"{MODEL}"'


def serve_answers(spec_path: str) -> int:
    """The served-answer child: ServedAnswers on 127.0.0.1:<free port> (printed as one JSON line)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    spec = json.loads(Path(spec_path).read_text())
    served = ServedAnswers(spec["pods"], spec["interval"])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
            self._answer(form)

        def do_GET(self) -> None:
            self._answer(parse_qs(urlsplit(self.path).query))

        def _answer(self, form: dict[str, list[str]]) -> None:
            body = served.answer(form.get("query", [""])[0], float(form.get("time", [str(time.time())])[0]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 64

    server = Server(("127.0.0.1", 0), Handler)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()
    return 0


# -- the watchdog side (a separate process per measurement) ------------------------------------------------------
def watchdog_side(spec: dict[str, Any]) -> dict[str, Any]:
    from watchdog.adapters.kubeimport import lean_client

    lean_client()  # as `run` does
    from watchdog.adapters.kube import KubeClient, KubeSettings
    from watchdog.adapters.logs import setup_logging
    from watchdog.adapters.podcache import PodCache
    from watchdog.config.loader import load_config
    from watchdog.controller.wiring import build

    config = load_config(None, env={}, flags=spec["settings"])
    setup_logging(config.log_format, config.log_level)
    kube = KubeClient.from_settings(KubeSettings(host=spec["emulator"], request_timeout_s=config.api_timeout_seconds))
    watchdog = build(config, kube, listing=PodCache(kube, first_sync_wait_s=120))  # as `run` does
    sections = _time_sections() if spec.get("sections") else None
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    interval, records = spec["interval"], []
    t0 = time.monotonic()
    for slot in range(spec["cycles"] + 1):  # the first is the warm-up
        wait = t0 + slot * interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        cpu, wall = time.process_time(), time.perf_counter()
        report = watchdog.run_cycle()
        records.append({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "pods": report.pods,
                        "scrapes": dict(report.scrapes), "engines": dict(report.engines),
                        "remediations": len(report.remediations),
                        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    watchdog.close()
    if sections is not None:  # CPU seconds per cycle of each section, over the measured cycles and the warm-up
        print("sections (CPU s per cycle, thread time): " + ", ".join(
            f"{name} {seconds / len(records):.3f}" for name, seconds in sections.items()), file=sys.stderr)
    return {"records": records, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_start_mib": rss_start}


def _time_sections() -> dict[str, float]:
    """Wrap the cycle's main steps to add up their thread CPU time (the main thread's; the Prometheus answers
    are decoded in the client's threads, so 'read' holds their folding, not their decoding)."""
    import watchdog.controller.cycle as cycle

    totals: dict[str, float] = {}

    def timed(name: str, owner: Any, attribute: str) -> None:
        inner = getattr(owner, attribute)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                totals[name] = totals.get(name, 0.0) + time.thread_time() - start

        setattr(owner, attribute, wrapper)

    for name, owner, attribute in (("discover", cycle, "discover"), ("read", cycle.Watchdog, "_read"),
                                   ("judge", cycle.Watchdog, "_judge"), ("act", cycle.Watchdog, "_act"),
                                   ("status", cycle, "snapshot"), ("publish", cycle.Watchdog, "_publish"),
                                   ("cycle", cycle.Watchdog, "run_cycle")):
        timed(name, owner, attribute)
    return totals


def measure(args: argparse.Namespace, emulator: str, source: str, prom_url: str, tmp: Path) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "scrape_interval_seconds": args.interval, "window_seconds": 120.0, "jitter_seconds": 0.0,
        "listen_address": "127.0.0.1:0", "log_format": "json", "log_level": "warning",
        "allow_loopback_pod_ips": True, "dry_run": True, "source": source,
    }
    if source == "prometheus":
        settings.update(prometheus_url=prom_url,
                        prometheus_timeout_seconds=args.query_timeout or min(5.0, args.interval * 0.6))
    spec = {"emulator": emulator, "settings": settings, "interval": args.interval, "cycles": args.cycles,
            "profile": args.profile, "sections": args.sections}
    spec_path, out_path = tmp / f"side-{source}.json", tmp / f"side-{source}.out.json"
    spec_path.write_text(json.dumps(spec))
    with open(tmp / f"side-{source}.log", "ab") as log:
        subprocess.run([sys.executable, str(HERE), "--side", str(spec_path), str(out_path)], stdout=log,
                       stderr=log, check=True, timeout=900, cwd=HERE.parents[2], env={**os.environ, **IMAGE_ENV})
    out: dict[str, Any] = json.loads(out_path.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", default="1000,10000,30000",
                        help="engine series measured against a real Prometheus, comma-separated (%(default)s)")
    parser.add_argument("--served", default="30000,100000",
                        help="engine series measured against a served answer of that size (no Prometheus runs: its "
                             "side is NOT A MEASUREMENT), comma-separated (%(default)s; '' for none)")
    parser.add_argument("--prometheus", default=PROMETHEUS_BINARY, help="the Prometheus binary (%(default)s)")
    parser.add_argument("--query-timeout", type=float, default=0.0,
                        help="prometheusTimeoutSeconds (default: the production 5 s, at most 60%% of --interval); "
                             "longer when the machine, not the design, is too slow to answer in time")
    parser.add_argument("--engines-per-pod", type=int, default=50,
                        help="data-parallel engines per pod (<= 64, the parser's series bound; default 50)")
    parser.add_argument("--cycles", type=int, default=5, help="measured cycles per measurement (default 5)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between cycle starts (default 5)")
    parser.add_argument("--prom-interval", type=float, default=5.0, help="Prometheus scrape interval, s (5)")
    parser.add_argument("--sources", default="prometheus,scrape", help="which sources to measure (%(default)s)")
    parser.add_argument("--profile", action="store_true", help="cProfile the watchdog side (top 30 in its log)")
    parser.add_argument("--sections", action="store_true",
                        help="print the watchdog's CPU per cycle in each step (discover, read, judge, ...) in its log")
    parser.add_argument("--side", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--pods", help=argparse.SUPPRESS)
    parser.add_argument("--answers", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        spec = json.loads(Path(args.side[0]).read_text())
        if spec.get("profile"):
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            result = profiler.runcall(watchdog_side, spec)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
        else:
            result = watchdog_side(spec)
        Path(args.side[1]).write_text(json.dumps(result))
        return 0
    if args.pods:
        return serve_pods(args.pods)
    if args.answers:
        return serve_answers(args.answers)

    sys.path.insert(0, str(HERE.parents[1] / "prometheus"))
    from prom_kit import FileTarget, PrometheusServer

    real = {int(n) for n in args.series.split(",") if n}
    served = {int(n) for n in args.served.split(",") if n}
    sizes = sorted(real | served)
    per_pod = args.engines_per_pod
    sources = args.sources.split(",")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; {per_pod} engines per "
          f"pod; watchdog interval {args.interval:g} s, Prometheus scrape interval {args.prom_interval:g} s; "
          f"{args.cycles} measured cycles; Prometheus {args.prometheus}", flush=True)
    procs = Processes()
    tmp = Path(tempfile.mkdtemp(prefix="bench-prometheus-"))
    prom = None
    rows: list[tuple[int, int, str, str, dict[str, Any]]] = []
    try:
        pods_needed = -(-max(sizes) // per_pod)
        plans = [PodPlan(i, f"127.11.{1 + i // 250}.{1 + i % 250}", "ok", per_pod,
                         namespace=f"fleet-{i % NAMESPACES:02d}") for i in range(pods_needed)]
        spec = tmp / "pods.json"
        spec.write_text(json.dumps({"keepalive_s": 30.0, "slow_s": 2.0, "render_s": 0.0,
                                    "pods": [[p.address, 8000, p.kind, p.engines] for p in plans]}))
        child = procs.start([sys.executable, str(HERE), "--pods", str(spec)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
        assert child.stdout is not None
        for plan, (_, port) in zip(plans, json.loads(child.stdout.readline())["bound"], strict=True):
            plan.port = port
        emulator = start_emulator(procs, tmp)
        seeder = Seeder(emulator, lean=True)
        for size in sizes:
            pods = -(-size // per_pod)
            seeder.ensure(plans, pods)
            if size in real:
                if prom is None:
                    (tmp / "prom").mkdir()
                    prom = PrometheusServer(tmp / "prom", binary=args.prometheus, scrape_interval_s=args.prom_interval)
                    prom.start()
                prom.set_targets([FileTarget(f"{p.address}:{p.port}", p.namespace, p.name) for p in plans[:pods]])
                t = time.monotonic()
                prom.wait_up({p.name: 1.0 for p in plans[:pods]}, timeout_s=300)
                time.sleep(2 * args.prom_interval)  # every target scraped more than once
                series = len(prom.query("vllm:num_requests_running"))
                print(f"{pods} pods, {series} engine series in Prometheus (up after {time.monotonic() - t:.0f} s)",
                      flush=True)
                for source in sources:
                    before = _prometheus_marks(prom)
                    out = measure(args, emulator, source, prom.url, tmp)
                    out["prometheus"] = _prometheus_costs(prom, before, len(out["records"]))
                    rows.append((size, pods, source, "prometheus", out))
                    _print_one(source, out)
            if size in served:
                url = _serve_answers(procs, plans[:pods], args.prom_interval, tmp, size)
                print(f"{pods} pods, {size} engine series in a served answer ({url})", flush=True)
                out = measure(args, emulator, "prometheus", url, tmp)
                rows.append((size, pods, "prometheus", "served", out))
                _print_one("prometheus", out)
        _print_table(rows)
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end; logs in {tmp}")
    finally:
        if prom is not None:
            prom.stop()
        procs.stop()
    return 0


def _serve_answers(procs: Processes, plans: list[PodPlan], interval: float, tmp: Path, size: int) -> str:
    """Start a ServedAnswers child for ``plans`` (their names as seeded); its URL."""
    spec = tmp / f"answers-{size}.json"
    spec.write_text(json.dumps({"interval": interval,
                                "pods": [[p.namespace, p.name, p.address, p.port, p.engines] for p in plans]}))
    child = procs.start([sys.executable, str(HERE), "--answers", str(spec)], stdout=subprocess.PIPE)
    assert child.stdout is not None
    return f"http://127.0.0.1:{json.loads(child.stdout.readline())['port']}"


_QUERY_SLICES = ("inner_eval", "prepare_time", "result_sort", "queue_time")


def _prometheus_marks(prom: Any) -> tuple[float, float]:
    """(seconds Prometheus' engine spent on queries so far: prometheus_engine_query_duration_seconds_sum over
    the slices that run a query, CPU seconds of its process so far)."""
    with urllib.request.urlopen(f"{prom.url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    spent = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("prometheus_engine_query_duration_seconds_sum")
                and any(f'slice="{s}"' in line for s in _QUERY_SLICES))
    fields = Path(f"/proc/{prom.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return spent, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _prometheus_costs(prom: Any, before: tuple[float, float], cycles: int) -> dict[str, float]:
    after = _prometheus_marks(prom)
    return {"query_s": (after[0] - before[0]) / cycles, "cpu_s": (after[1] - before[1]) / cycles}


def _print_one(source: str, out: dict[str, Any]) -> None:
    measured = out["records"][1:]
    cpu = statistics.median(r["cpu"] for r in measured)
    costs = out.get("prometheus")
    theirs = (f"; Prometheus: queries {costs['query_s']:.3f} s per cycle, process CPU {costs['cpu_s']:.3f} s per "
              f"cycle (its scrapes included)" if costs else "")
    print(f"  {source:<10} CPU/cycle median {cpu:.3f} s (max {max(r['cpu'] for r in measured):.3f}), "
          f"wall median {statistics.median(r['wall'] for r in measured):.3f} s, cold "
          f"{out['records'][0]['cpu']:.3f} s CPU; RSS {out['rss_mib']:.1f} MiB (start "
          f"{out['rss_start_mib']:.1f}, after the warm-up {out['records'][0]['rss_mib']:.1f}); "
          f"scrapes/cycle {measured[-1]['scrapes']}; engines {measured[-1]['engines']}{theirs}", flush=True)


def _print_table(rows: list[tuple[int, int, str, str, dict[str, Any]]]) -> None:
    print(f"\n{'engine series':>13} {'pods':>5} {'source':<10} {'against':<10} {'CPU s/cycle':>11} {'RSS MiB':>8} "
          f"{'Prometheus query s/cycle':>24}   goals: {GOALS_TEXT}")
    for size, pods, source, against, out in rows:
        cpu = statistics.median(r["cpu"] for r in out["records"][1:])
        failed = sum(1 for r in out["records"][1:] if set(r["scrapes"]) - {"ok"})
        goal = GOALS.get(size) if source == "prometheus" else None
        mark = "" if goal is None else ("  ok" if cpu <= goal[0] and out["rss_mib"] <= goal[1] else "  OVER GOAL")
        if failed:  # a cycle whose pods were not all read costs less than one that reads them: no figure
            mark = (f"  NOT A MEASUREMENT: {failed} of {len(out['records']) - 1} measured cycles had pods "
                    "unknown (Prometheus slower than its timeout? a longer --interval gives it 60% of it)")
        theirs = (f"{out['prometheus']['query_s']:>24.3f}" if "prometheus" in out
                  else f"{'NOT A MEASUREMENT':>24}" if against == "served" else f"{'':>24}")
        print(f"{size:>13} {pods:>5} {source:<10} {against:<10} {cpu:>11.3f} {out['rss_mib']:>8.1f} {theirs}{mark}")


if __name__ == "__main__":
    sys.exit(main())
