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
    elapsed = time.monotonic() - _started  # the whole session's: the seeds' own wall time when only they ran
    workers = getattr(terminalreporter.config.option, "numprocesses", None) or 1  # xdist's -n (the controller's)
    spent = sum(r.duration for r in passed)  # in the seed tests, summed over the workers
    terminalreporter.write_line(f"sim: {seeds} seeds in {elapsed:.1f} s of the session on {workers} worker(s); "
                                f"{spent:.1f} s in the seed tests: {seeds / max(spent, 1e-9):.1f} seeds/s per worker")
