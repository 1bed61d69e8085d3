"""Running ``python -m watchdog run`` as a process of its own, for the tests that need one (test_service.py,
test_readyz_credentials.py): start it, read its stderr lines, find where it serves, GET its endpoints."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def clean_env() -> dict[str, str]:
    """The environment without WATCHDOG_* variables from the outside."""
    return {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}


def get(base: str, path: str) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of GET ``base + path``, HTTP errors included."""
    try:
        with urllib.request.urlopen(base + path, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


@contextlib.contextmanager
def start_run(*args: str) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """``python -m watchdog run ARGS`` in the background for the block; its stderr lines arrive on the queue ("" at
    EOF). Killed after the block if it still runs (a test that failed before stopping it)."""
    proc = subprocess.Popen([sys.executable, "-m", "watchdog", "run", *args], cwd=REPO, stderr=subprocess.PIPE,
                            text=True, env=clean_env())
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put("")  # EOF

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def serving_address(lines: queue.Queue[str]) -> str:
    while True:
        line = lines.get(timeout=20)
        assert line, "the watchdog ended before serving"
        if "serving /metrics /healthz /readyz /status on " in line:
            return line.rsplit(" on ", 1)[1].strip()


def rest_of(lines: queue.Queue[str]) -> list[str]:
    rest = []
    while (line := lines.get(timeout=10)) != "":
        rest.append(line)
    return rest
