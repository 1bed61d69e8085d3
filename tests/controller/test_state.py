"""What the cycle remembers per pod (watchdog/controller/state.py): the scrapes in a row that timed out."""

from __future__ import annotations

from watchdog.controller.state import PodRecord
from watchdog.core.model import ScrapeTarget

TARGET = ScrapeTarget(uid="uid-0", namespace="ns", name="pod-0", ip="10.0.0.1", port=8000, path="/metrics",
                      target="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


def test_timeouts_count_the_timed_out_scrapes_in_a_row_and_any_other_outcome_restarts_them() -> None:
    pod = PodRecord(0, 0.0)
    counts = []
    for now, outcome in enumerate(["timeout", "timeout", "timeout", "connection", "timeout", "ok", "timeout"]):
        pod.note_scrape(TARGET, outcome, float(now))
        counts.append(pod.timeouts)
    assert counts == [1, 2, 3, 0, 1, 0, 1]
