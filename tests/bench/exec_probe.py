"""The alternative the original proposal described, for comparison in ``bench_fleet.py``: an exec liveness
probe in every vLLM container that runs ``python3 -c PROBE`` once per probe period.

The probe (``PROBE``, below) is written the way such a probe would be written to be cheap: only the
standard library (no prometheus_client), ``urllib`` GET of ``/metrics`` (no gzip, as urllib does not ask for
it), a line scan for the four series, state kept in a JSON file between runs (written atomically), and the
same decision as the watchdog: busy (running > 0) with generation tokens, prompt tokens and the iteration
heartbeat all unchanged for ``WINDOW`` seconds -> exit 1 (the kubelet would restart the container after
``failureThreshold`` failures). A failed scrape exits 0 (unknown is not evidence). Engines are summed, as a
probe of one container would.

:func:`measure` runs it ``checks`` times as a child process against one URL and returns the CPU seconds per
check (user + system of the children, ``resource.getrusage(RUSAGE_CHILDREN)``). Not counted, and not small on
a real node: the container runtime's work for each exec (runc/CRI exec, a new process in the container's
namespaces and cgroup) and the kubelet's side of it.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

PROBE = r"""
import json, os, sys, time, urllib.request
URL, STATE, WINDOW = os.environ["PROBE_URL"], os.environ["PROBE_STATE"], float(os.environ["PROBE_WINDOW"])
WANTED = {"vllm:num_requests_running": 0, "vllm:generation_tokens_total": 1, "vllm:prompt_tokens_total": 2,
          "vllm:iteration_tokens_total_count": 3}
try:
    with urllib.request.urlopen(URL, timeout=3) as response:
        body = response.read().decode("utf-8", "replace")
except Exception as exc:
    print("probe: scrape failed, unknown:", exc)
    sys.exit(0)
values = [None, None, None, None]
for line in body.splitlines():
    if not line.startswith("vllm:"):
        continue
    name = line.split("{", 1)[0].split(" ", 1)[0]
    index = WANTED.get(name)
    if index is not None:
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        values[index] = (values[index] or 0.0) + value
running, counters, now = values[0], values[1:], time.time()
if running is None or all(v is None for v in counters):
    sys.exit(0)
try:
    with open(STATE) as f:
        state = json.load(f)
except (OSError, ValueError):
    state = {}
if running <= 0 or counters != state.get("counters"):
    state = {"counters": counters, "since": now}
    tmp = STATE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, STATE)
    sys.exit(0)
if now - state["since"] >= WINDOW:
    print(f"probe: {running:g} running, counters frozen for {now - state['since']:.0f} s")
    sys.exit(1)
sys.exit(0)
"""


@dataclass(frozen=True)
class ProbeCost:
    cpu_s_per_check: float
    wall_s_per_check: float
    exit_codes: tuple[int, ...]


def measure(url: str, checks: int = 20, window_s: float = 120.0, python: str = sys.executable) -> ProbeCost:
    """Run the probe ``checks`` times against ``url``; CPU and wall seconds per check (children only)."""
    with tempfile.TemporaryDirectory(prefix="exec-probe-") as tmp:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROBE_URL": url,
               "PROBE_STATE": os.path.join(tmp, "state.json"), "PROBE_WINDOW": str(window_s)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        codes = []
        for _ in range(checks):
            done = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, timeout=30, check=False)
            codes.append(done.returncode)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ProbeCost(cpu / checks, wall / checks, tuple(codes))
