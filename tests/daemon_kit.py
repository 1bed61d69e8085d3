"""Waiting for a daemon a tier starts on loopback (Prometheus in tests/prometheus/prom_kit.py, the OCI registry in
tests/release/conftest.py) to answer. Not a test module: test modules import from here, never from each other."""

from __future__ import annotations

import subprocess
import time
import urllib.request


def unready(proc: subprocess.Popen[bytes], url: str, timeout_s: float, answer_timeout_s: float) -> str | None:
    """GET ``url`` (``answer_timeout_s`` each, every 0.2 s) until it answers 200: None; or why it did not within
    ``timeout_s``: ``exited with <code>`` (``proc`` ended) or ``not ready after <timeout_s> s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=answer_timeout_s) as answer:
                if answer.status == 200:
                    return None
        except OSError:
            pass
        time.sleep(0.2)
    return f"not ready after {timeout_s} s"
