"""The simulation's figure: seeds per second of the run (printed at the end when sim seeds ran)."""

from __future__ import annotations

import os
import time
from typing import Any

_started = time.monotonic()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    passed = [r for r in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
              if "test_seeds_hold_every_oracle" in r.nodeid]
    if not passed:
        return
    seeds = 1 if os.environ.get("SIM_SEED") else int(os.environ.get("SIM_SEEDS", "200"))
    elapsed = time.monotonic() - _started
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    terminalreporter.write_line(f"sim: {seeds} seeds in {elapsed:.1f} s: {seeds / elapsed:.1f} seeds/s "
                                f"({workers} worker(s))")
