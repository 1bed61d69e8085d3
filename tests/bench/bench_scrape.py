"""Benchmark (not a test): CPU per section of one pod-scrape -- the GET, gzip inflate, parse -- on loopback.

    python tests/bench/bench_scrape.py [--pods 200] [--threads 1,16,136] [--rounds 3] [--render 0.005]

One ``fleet_server.py`` process serves ``--pods`` healthy simulated pods on 127.30.x.y (the fleet benchmark's
real bodies: ``expositions.py``, 65 KB, or 380 KB for every tenth pod with 8 engines; a new TCP connection per
scrape; answering after ``--render`` s x sqrt(engines) like vLLM). This process scrapes them with the
watchdog's own :class:`~watchdog.adapters.scrape.Scraper` and parser, once per encoding the scraper can ask for
(``Accept-Encoding: identity``, its default, and ``gzip``: the ``scrapeEncoding`` setting), asking for the profile's
sample names only (``?name[]=``, as the cycle does; the server renders only those, as a current vLLM does) and not
(``--names``):

- **sequential** (one thread): ``time.thread_time`` around each section, per pod-scrape: ``fetch`` (the whole
  ``Scraper.fetch``: connect, request, response, read, inflate), of which ``inflate`` (the same bodies' gzip
  inflated again with the scraper's ``Inflater``, outside the fetch), ``GET`` = fetch - inflate, and ``parse``
  (``parse_exposition``);
- **concurrent** (``--threads`` > 1, a thread pool as the cycle's fan-out before the event loop):
  ``time.process_time`` of the whole round divided by the pods, fetch alone and fetch + parse, and the wall time
  of the round;
- **async** (``--limits``: scrapes at once): :class:`~watchdog.adapters.ascrape.AsyncScraper`, every scrape a
  coroutine on its one loop run by the cycle's own fan-out (``Fanout.gather``, ``limit`` workers), the CPU time of
  the loop's thread (nothing else runs on it), at most
  ``limit`` at once, each body parsed on the loop as it arrives.

Medians over ``--rounds`` rounds. Figures only, no assertion (the machine is shared: the load average is
printed). ``py-spy record --pid <this process> --format raw`` sees every thread (cProfile sees one).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

import builders

from watchdog.adapters.ascrape import AsyncScraper
from watchdog.adapters.inflate import Inflater
from watchdog.adapters.scrape import ENCODINGS
from watchdog.controller.fanout import Fanout
from watchdog.controller.state import PodRecord
from watchdog.core.lines import scrape_url
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import get_profile

Scraper = AsyncScraper  # the one scrape transport: its synchronous fetch (the threaded urllib3 scraper is gone)

HERE = Path(__file__).resolve()
R = TypeVar("R")


def start_server(pods: int, render_s: float, tmp: Path) -> tuple[subprocess.Popen[bytes], list[str]]:
    """One fleet_server.py process with ``pods`` healthy pods (every tenth with 8 engines); their URLs."""
    spec = [[f"127.30.{1 + i // 250}.{1 + i % 250}", 8000, "ok", 8 if i % 10 == 9 else 1] for i in range(pods)]
    path = tmp / "pods.json"
    path.write_text(json.dumps({"keepalive_s": 2.0, "render_s": render_s, "pods": spec}))
    child = subprocess.Popen([sys.executable, str(HERE.parent / "fleet_server.py"), str(path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise SystemExit("the pod server did not start")
    return child, [f"http://{a}:{p}/metrics" for a, p in json.loads(line)["bound"]]


def inflate(packed: bytes, cap: int) -> bytes:
    inflater = Inflater(cap)
    out = b"".join(inflater.feed(packed[i:i + 65536]) for i in range(0, len(packed), 65536))
    inflater.finish()
    return out


def sequential(scraper: Scraper, urls: list[str], encoding: str) -> dict[str, float]:
    """Thread CPU ms per pod-scrape of each section, one scrape at a time."""
    profile = get_profile("vllm")
    fetch_s = parse_s = inflate_s = 0.0
    for url in urls:
        t0 = time.thread_time()
        body = scraper.fetch(url)
        t1 = time.thread_time()
        parse_exposition(body, profile)
        t2 = time.thread_time()
        fetch_s += t1 - t0
        parse_s += t2 - t1
        if encoding == "gzip":
            packed = gzip.compress(body)  # as the pod server compresses it
            t3 = time.thread_time()
            inflate(packed, scraper.limits.max_bytes)
            inflate_s += time.thread_time() - t3
    n = len(urls)
    return {"fetch": 1000 * fetch_s / n, "inflate": 1000 * inflate_s / n, "GET": 1000 * (fetch_s - inflate_s) / n,
            "parse": 1000 * parse_s / n}


def concurrent(scraper: Scraper, urls: list[str], threads: int, with_parse: bool) -> tuple[float, float]:
    """(process CPU ms per pod-scrape, wall s) of scraping every URL on ``threads`` threads."""
    profile = get_profile("vllm")

    def one(url: str) -> None:
        body = scraper.fetch(url)
        if with_parse:
            parse_exposition(body, profile)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda _: time.sleep(0.01), range(threads)))  # the threads exist before the clock starts
        cpu, wall = time.process_time(), time.monotonic()
        list(pool.map(one, urls))
        return 1000 * (time.process_time() - cpu) / len(urls), time.monotonic() - wall


def concurrent_async(scraper: AsyncScraper, urls: list[str], limit: int, with_parse: bool) -> tuple[float, float]:
    """(CPU ms per pod-scrape of the loop's thread, wall s) of scraping every URL through the cycle's own fan-out
    (:meth:`Fanout.gather`, ``limit`` workers), each body parsed on the loop as it arrives."""
    profile = get_profile("vllm")
    jobs = [(WatchedPod(uid=str(i), namespace="bench", name=f"pod-{i}", ip="127.0.0.1", port=8000, path="/metrics",
                        target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None),
             PodRecord(0, 0.0)) for i in range(len(urls))]
    cpu: list[float] = []

    async def one(target: WatchedPod, record: PodRecord, deadline_s: float | None) -> None:
        body = await scraper.fetch_async(urls[int(target.uid)])
        if with_parse:
            parse_exposition(body, profile)

    class Timed:  # the fan-out's loop, its thread's CPU time around the whole gather
        def run(self, coro: Coroutine[Any, Any, R]) -> Future[R]:
            async def timed() -> R:
                start = time.thread_time()
                try:
                    return await coro
                finally:
                    cpu.append(time.thread_time() - start)
            return scraper.run(timed())

    wall = time.monotonic()
    Fanout(limit, deadline_s=scraper.limits.deadline_s).gather(jobs, one, Timed()).result()  # type: ignore[arg-type]
    return 1000 * cpu[0] / len(urls), time.monotonic() - wall


def at_once(rounds: int, label: str, run: Callable[[bool], tuple[float, float]], clock: str = "process") -> None:
    """Print the median CPU (of ``clock``) per pod-scrape and wall time of ``run(with_parse)``, without and with
    parsing."""
    for with_parse in (False, True):
        r = median_of(rounds, lambda p=with_parse: dict(zip(("cpu", "wall"), run(p), strict=True)))
        what = "fetch + parse" if with_parse else "fetch"
        print(f"  {label}, {what:<13}: {clock} CPU {r['cpu']:.3f} ms per pod-scrape, wall {r['wall']:.2f} s",
              flush=True)


def median_of(rounds: int, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
    results = [fn() for _ in range(rounds)]
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=200, help="simulated pods (default: 200)")
    parser.add_argument("--threads", default="1,16,136", help="fan-out sizes, comma-separated (1: sequential)")
    parser.add_argument("--limits", default="136", help="async scrapes at once, comma-separated ('': none)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure; the median is printed (3)")
    parser.add_argument("--render", type=float, default=0.005, help="pod answer delay, s x sqrt(engines) (0.005)")
    parser.add_argument("--encodings", default=",".join(ENCODINGS), help="Accept-Encoding values to measure")
    parser.add_argument("--names", default="yes,no",
                        help="ask for the profile's sample names only (?name[]=, as the cycle does), or not: "
                             "each measured (%(default)s)")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"python {sys.version.split()[0]}; {args.pods} pods (10% with 8 engines), answer after {args.render:g} s; "
          f"pid {os.getpid()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmp:
        child, base = start_server(args.pods, args.render, Path(tmp))
        try:
            for names, encoding in ((n, e) for n in args.names.split(",") for e in args.encodings.split(",")):
                urls = [scrape_url(u, get_profile("vllm")) if names == "yes" else u for u in base]
                scraper = Scraper(builders.scrape_limits(), encoding=encoding)
                scraper.fetch(urls[0])  # warm-up: imports, the deadline thread
                print(f"\nAccept-Encoding: {encoding}; {'only the profile' if names == 'yes' else 'every'} series "
                      f"({len(scraper.fetch(urls[0]))} bytes for a 1-engine pod)")
                if 1 in threads:
                    r = median_of(args.rounds, lambda s=scraper, e=encoding, u=urls: sequential(s, u, e))
                    print("  sequential, thread CPU ms per pod-scrape: "
                          + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
                for n in (t for t in threads if t > 1):
                    at_once(args.rounds, f"{n:>3} threads", lambda p, n=n, s=scraper, u=urls: concurrent(s, u, n, p))
                looped = AsyncScraper(builders.scrape_limits(), encoding=encoding)
                looped.fetch(urls[0])  # warm-up: the loop's thread
                for n in (int(x) for x in args.limits.split(",") if x):
                    at_once(args.rounds, f"async, {n:>3} at once",
                            lambda p, n=n, s=looped, u=urls: concurrent_async(s, u, n, p), "loop thread")
                looped.close()
        finally:
            child.stdin.close()  # type: ignore[union-attr]
            child.wait(timeout=10)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
