"""What the end-to-end tests that run the watchdog as a process of its own share. Not a test module: test modules
import from here, never from each other."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment
from watchdog.demo.simpod import SimPod


def run_watchdog(config: Path, kubeconfig: Path, log: Path, until: float, done: object) -> str:
    """``watchdog run`` with ``config`` against ``kubeconfig`` until ``done()`` or ``until`` seconds, then SIGTERM;
    its output (written to ``log``)."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "--config", str(config),
                                 "--kubeconfig", str(kubeconfig)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            deadline = time.monotonic() + until
            while time.monotonic() < deadline and proc.poll() is None and not done():  # type: ignore[operator]
                time.sleep(0.25)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    return log.read_text()


@contextlib.contextmanager
def started(*sims: SimPod) -> Iterator[tuple[SimPod, ...]]:
    """The simulated pods, serving for the block and stopped after it."""
    for sim in sims:
        sim.start()
    try:
        yield sims
    finally:
        for sim in sims:
            sim.stop()


def seed_healthy(api: EmulatorServer, sim: SimPod, count: int) -> None:
    """``count`` opted-in namespaces ``ok-0``.. with one progressing pod each (served by ``sim``): enough healthy
    pods that the mass-stall breaker stays shut for the wedged ones a test adds."""
    for i in range(count):
        api.create_namespace(f"ok-{i}", {"vllm-watchdog.io/enabled": "true"})
        seed_deployment(api, f"ok-{i}", "llama", sim.address, sim.port)


def deferral_in(api: EmulatorServer, namespace: str) -> bool:
    """Whether a StalledPodDeletionDeferred Event was written in ``namespace``."""
    return any(e["reason"] == "StalledPodDeletionDeferred" for e in api.list_events(namespace))
