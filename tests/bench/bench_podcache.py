"""The discovery cache's own cost (a script, not a test): RSS and CPU of an informer holding N trimmed pods.

    python tests/bench/bench_podcache.py [--sizes 2000,10000]

Each size runs in a fresh process. The API's answers are the benchmark's realistic ~6 KiB vLLM pods
(``bench_fleet.realistic_pod``), served as JSON bytes by a stand-in for ``KubeClient`` (no HTTP: what is
measured is the cache's decode, trim and storage, with the informer's real paged LIST code), then
watch events (one MODIFIED per pod, JSON-decoded per line as the client does) applied to the cache.
Figures: RSS (``ru_maxrss``) before and after the LIST, the memory the cache retains (tracemalloc), CPU of the
LIST and per watch event, the trimmed pod's size.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(size: int) -> dict[str, Any]:
    from bench.bench_fleet import plan_fleet, realistic_pod
    from watchdog.adapters import podcache
    from watchdog.adapters.podcache import Informer

    plans = plan_fleet(size, 0, 0, 0, seed=1)
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "llm-7d9f8b6c5", "uid": "rs-uid"}}
    for plan in plans:
        plan.name = f"llm-7d9f8b6c5-{plan.index:05d}"

    class Pages:
        """list_page as the API server pages it, each page built as JSON bytes only when asked for (the time
        spent building it is kept apart in ``gen_s``: not the cache's)."""

        api_requests = 0
        gen_s = 0.0

        def list_page(self, resource: str, selector: str, limit: int, token: str | None,
                      namespace: str | None = None, *, max_bytes: int) -> dict[str, Any]:
            t = time.process_time()
            start = int(token or 0)
            chunk = [realistic_pod(p, rs) for p in plans[start:start + limit]]
            for i, pod in enumerate(chunk):
                pod["metadata"]["uid"] = f"uid-{start + i}"
            more = start + limit < len(plans)
            raw = json.dumps({"metadata": {"resourceVersion": "100", **({"continue": str(start + limit)} if more
                                                                         else {})}, "items": chunk}).encode()
            del chunk
            self.gen_s += time.process_time() - t
            return json.loads(raw)  # type: ignore[no-any-return]  # what KubeClient._call returns

    gc.collect()
    before = rss_mib()
    pages = Pages()
    informer = Informer(pages, "pods", "app=vllm")  # type: ignore[arg-type]
    cpu = time.process_time()
    informer._list()
    list_cpu = time.process_time() - cpu - pages.gen_s
    gc.collect()
    after_list = rss_mib()
    event_cpu = 0.0
    for i, plan in enumerate(plans):
        pod = realistic_pod(plan, rs)
        pod["metadata"].update(uid=f"uid-{i}", resourceVersion=str(200 + i))
        line = json.dumps({"type": "MODIFIED", "object": pod})
        t = time.process_time()
        informer._apply(json.loads(line))
        event_cpu += time.process_time() - t
    trimmed = json.dumps(informer.items()[0])
    # The cache's retained memory, measured apart (tracemalloc slows everything down: not in the CPU pass).
    del informer
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kept = Informer(Pages(), "pods", "app=vllm")  # type: ignore[arg-type]
    kept._list()
    gc.collect()
    retained = (tracemalloc.get_traced_memory()[0] - base) / 2**20
    tracemalloc.stop()
    return {"size": size, "rss_before": before, "rss_after_list": after_list, "retained_mib": retained,
            "list_cpu_s": list_cpu, "event_cpu_ms": 1000 * event_cpu / size, "pods": len(kept.items()),
            "page": podcache.PAGE, "full_json": len(json.dumps(realistic_pod(plans[0], rs))),
            "trimmed_json": len(trimmed)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one)))
        return 0
    print(f"{'pods':>6} {'RSS before':>10} {'after LIST':>10} {'retained MiB':>12} {'LIST CPU s':>10} "
          f"{'event CPU ms':>12} {'pod JSON B':>10} {'trimmed B':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(size)], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['pods']:>6} {r['rss_before']:>10.1f} {r['rss_after_list']:>10.1f} {r['retained_mib']:>12.1f} "
              f"{r['list_cpu_s']:>10.2f} {r['event_cpu_ms']:>12.3f} {r['full_json']:>10} {r['trimmed_json']:>9}")
    print("RSS: peak ru_maxrss of a fresh process, MiB (imports included; 'after LIST' also holds one page of full "
          "pods being decoded, and the stand-in's own page). 'retained': what the cache keeps (tracemalloc). CPU: "
          "decode + trim + store, the stand-in's page building excluded; per watch event: json.loads + trim.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
