"""What the end-to-end tests that run the watchdog as a process of its own share. Not a test module: test modules
import from here, never from each other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


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
