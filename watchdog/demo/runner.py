"""The ``demo`` verb's story: the real watchdog process against an embedded Kubernetes API emulator and four
simulated pods.

Everything runs on loopback: the emulator (kmock-based, not a cluster) on 127.0.0.1, and four simulated
vLLM pods on 127.0.0.2-5 serving vLLM V1 metric families — busy and progressing, idle, a long chunked prefill
(only the KV-cache usage gauge moves) and one that wedges after a few seconds. The watchdog runs as a separate process
(``python -m watchdog run``) with a short window. The demo prints a timeline and a summary, and exits 0 only
if exactly the wedged pod was deleted, with ``StalledPodDeleted`` Events on the pod and on its Deployment.

``demo --control-plane real`` tells the same story on a real control plane instead
(:mod:`watchdog.demo.controlplane.story`, which prints its timeline with :func:`say` and :func:`follow`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PODS = (("busy", "progressing"), ("idle", "idle"), ("prefill", "prefill"), ("wedge", "wedge_after"))
NAMESPACE = "inference"
_PRINTING = threading.Lock()  # the timeline is printed from two threads (the story and the log follower)


WIDTH = 120  # the timeline's columns: a longer entry is wrapped at a space, never cut


def say(start: float, text: str) -> None:
    """One timeline entry: seconds since ``start``, then ``text``, wrapped at :data:`WIDTH` columns with its
    continuation lines indented under the text (after its ``who |`` column, when it has one)."""
    stamp = f"[{time.monotonic() - start:6.1f}s] "
    who = text.split(" | ", 1)[0] + " | " if " | " in text[:12] else ""
    lines = textwrap.wrap(text, WIDTH, initial_indent=stamp, subsequent_indent=" " * (len(stamp) + len(who)),
                          break_long_words=False, break_on_hyphens=False) or [stamp]
    with _PRINTING:
        print("\n".join(lines), flush=True)


def follow(lines: Iterable[str], start: float, verbose: bool) -> None:
    """Print the watchdog's state changes, remediations and (when they change) cycle summaries from its
    text-format log ``lines`` (everything with ``verbose``)."""
    last_cycle = ""
    for raw in lines:
        line = raw.rstrip().split(": ", 1)[-1] if ": " in raw else raw.rstrip()
        if line.startswith("cycle done:"):
            summary = line.split(", skipped", 1)[0]
            if summary == last_cycle and not verbose:
                continue
            last_cycle = summary
        elif not (verbose or re.search(r" -> |remediation \w+:|DRY-RUN|ERROR|Traceback", raw)):
            continue
        if " new -> " in raw and not verbose:  # a series' first verdict: not a change worth a timeline line
            continue
        say(start, "watchdog | " + line)


def _new_events(api: Any, seen: set[str], start: float) -> None:
    for e in api.list_events(NAMESPACE):
        uid = e["metadata"].get("uid") or e["metadata"]["name"]
        if uid not in seen:
            seen.add(uid)
            inv = e["involvedObject"]
            say(start, f"Event    | {e['type']} {e['reason']} on {inv['kind']}/{inv['name']}")


def run_demo(args: argparse.Namespace) -> int:
    """The ``demo`` verb."""
    try:
        from watchdog.demo.emulator import EmulatorServer
        from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
        from watchdog.demo.simpod import SimPod
    except ModuleNotFoundError as exc:
        print(f"vllm-watchdog demo: missing {exc.name}; install the demo extra: pip install -e '.[demo]'",
              file=sys.stderr)
        return 2
    start = time.monotonic()
    sims: list[Any] = []
    proc: subprocess.Popen[str] | None = None
    with EmulatorServer() as api, tempfile.TemporaryDirectory(prefix="vllm-watchdog-demo-") as tmp:
        try:
            say(start, f"Kubernetes API emulator (not a real cluster) on {api.base_url}")
            api.create_namespace(NAMESPACE, {"vllm-watchdog.io/enabled": "true"})
            seeded: dict[str, dict[str, Any]] = {}
            for i, (name, mode) in enumerate(PODS):
                sim = SimPod(f"127.0.0.{i + 2}", 0, mode, wedge_after_s=args.wedge_after)
                sim.start()
                sims.append(sim)
                seeded[name] = seed_deployment(api, NAMESPACE, f"llama-{name}", sim.address, sim.port)
                say(start, f"pod {seeded[name]['pod']['metadata']['name']:<32} {sim.url:<24} mode {mode}")
            settings = {**FAST_SETTINGS, "windowSeconds": args.window,
                        "scrapeIntervalSeconds": min(1.0, args.window / 3)}
            config = write_config(Path(tmp) / "config.yaml", **settings)
            kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", api.base_url)
            cmd = [sys.executable, "-m", "watchdog", "run", "--config", str(config),
                   "--kubeconfig", str(kubeconfig)]
            say(start, f"starting the watchdog process: python -m watchdog run --config {config.name} "
                        f"--kubeconfig {kubeconfig.name} (window {args.window:g} s)")
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            threading.Thread(target=follow, args=(proc.stdout, start, args.verbose), daemon=True).start()
            seen: set[str] = set()
            deadline = start + args.timeout
            wedged = seeded["wedge"]["pod"]["metadata"]["name"]
            while time.monotonic() < deadline and proc.poll() is None:
                _new_events(api, seen, start)
                if api.get_pod(NAMESPACE, wedged) is None and len(api.list_events(NAMESPACE)) >= 2:
                    break
                time.sleep(0.25)
            time.sleep(2 * settings["scrapeIntervalSeconds"])  # a couple more cycles: nothing else may go
            _new_events(api, seen, start)
            return _summary(api, seeded, start, proc)
        finally:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            for sim in sims:
                sim.stop()


def _summary(api: Any, seeded: dict[str, dict[str, Any]], start: float, proc: subprocess.Popen[str]) -> int:
    print("\nsummary", flush=True)
    ok = proc.poll() is None
    if not ok:
        print(f"  the watchdog process exited early with status {proc.returncode}")
    for name, objs in seeded.items():
        pod = objs["pod"]["metadata"]["name"]
        gone = api.get_pod(NAMESPACE, pod) is None
        expected_gone = name == "wedge"
        ok &= gone == expected_gone
        mark = "ok  " if gone == expected_gone else "FAIL"
        print(f"  {mark} {pod:<34} {'deleted' if gone else 'kept'} (expected {'deleted' if expected_gone else 'kept'})")
    events = api.list_events(NAMESPACE)
    for e in events:
        inv = e["involvedObject"]
        print(f"  event {e['type']} {e['reason']} on {inv['kind']}/{inv['name']}: {e['message']}")
    targets = {(e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events}
    wedge = seeded["wedge"]
    want = {("StalledPodDeleted", "Pod", wedge["pod"]["metadata"]["name"]),
            ("StalledPodDeleted", "Deployment", wedge["deployment"]["metadata"]["name"])}
    ok &= targets == want
    if targets != want:
        print(f"  FAIL events: expected exactly {sorted(want)}, got {sorted(targets)}")
    verdict = "exactly the wedged pod was deleted, with Events on pod and Deployment" if ok else "see above"
    print(f"\n{'PASS' if ok else 'FAIL'}: {verdict} ({time.monotonic() - start:.1f} s)")
    return 0 if ok else 1
