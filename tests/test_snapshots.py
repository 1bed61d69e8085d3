"""The outside of the watchdog, pinned: ``run --help``, the settings table (flag, env var, file key, type,
default) and the metric names were snapshotted before the layout move (tests/snapshots/) and must stay the
same. A deliberate change updates the snapshot in the same commit (``UPDATE_SNAPSHOTS=1 pytest this file``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.adapters.metrics import new_metrics
from watchdog.config.settings import SETTINGS

SNAPSHOTS = Path(__file__).parent / "snapshots"


def settings_rows() -> list[dict[str, object]]:
    return [{"name": s.name, "type": s.type, "default": s.default, "flag": s.flag, "env": s.env, "key": s.key,
             "choices": list(s.choices), "minimum": s.minimum, "optional": s.optional} for s in SETTINGS]


def run_help() -> str:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "watchdog", "run", "--help"], capture_output=True, text=True,
                          env=env, check=True, timeout=60).stdout


def metric_names() -> str:
    m = new_metrics()
    m.watch_workloads({("ns", "target")})  # the per-workload series exist for watched (namespace, target) pairs
    m.publish_engines({("ns", "pod", "target", 'engine="0"'): 0.0}, {})  # perEngineMetrics
    return "\n".join(sorted({s.name for f in m.registry.collect() for s in f.samples})) + "\n"


@pytest.mark.parametrize(("name", "produce"), [
    ("run-help.txt", run_help),
    ("settings.json", lambda: json.dumps(settings_rows(), indent=1)),
    ("metrics.txt", metric_names),
])
def test_outside_matches_the_snapshot(name: str, produce: object) -> None:
    assert callable(produce)
    now = produce()
    path = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(now)
    assert now == path.read_text(), f"{name} changed; if on purpose: UPDATE_SNAPSHOTS=1 pytest {__file__}"
