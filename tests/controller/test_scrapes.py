"""One pod's scrape as the cycle sees it (watchdog/controller/scrapes.py): on the loop, a failure of any kind is that
pod's own outcome -- unknown, with why -- and never the batch's (one future for the whole fleet)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from watchdog.adapters.metrics import new_metrics
from watchdog.adapters.scrape import ScrapeError
from watchdog.controller.scrapes import Scrapes
from watchdog.controller.state import PodRecord
from watchdog.core.model import WatchedPod
from watchdog.core.profiles import get_profile

TARGET = WatchedPod(uid="uid-0", namespace="ns", name="pod-0", ip="10.0.0.1", port=8000, path="/metrics",
                    target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)
BODY = b'vllm:num_requests_running{engine="0"} 2\nvllm:generation_tokens_total{engine="0"} 5\n'


class Loop:
    """An AsyncFetcher whose fetch_async answers ``outcome``: bytes, or an exception to raise."""

    def __init__(self, outcome: bytes | BaseException) -> None:
        self.outcome = outcome
        self.deadlines: list[float | None] = []

    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
        self.deadlines.append(deadline_s)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def fetch(self, url: str) -> bytes:
        raise AssertionError("not on the loop")

    def run(self, coro: Any) -> Any:
        raise AssertionError("not used")

    def close(self) -> None: ...


@pytest.mark.parametrize(("outcome", "expected", "detail"), [
    (BODY, "ok", ""),
    (ScrapeError("timeout", "timeout after 3 s"), "timeout", "timeout after 3 s"),
    (RuntimeError("a bug"), "connection", "scrape failed unexpectedly: RuntimeError: a bug"),
])
def test_on_the_loop_every_failure_is_the_pods_own_outcome(outcome: bytes | BaseException, expected: str,
                                                            detail: str) -> None:
    scrapes = Scrapes(Loop(outcome), {"vllm": get_profile("vllm")}, new_metrics())
    pod = PodRecord(0, 0.0)
    result, parsed = asyncio.run(scrapes.on_loop(TARGET, pod))
    assert result == expected and pod.scrape_detail == detail
    assert (parsed is not None) == (expected == "ok") and pod.scrape_seconds > 0


def test_on_the_loop_a_shortened_deadline_is_passed_on_and_named_in_the_detail() -> None:
    loop = Loop(ScrapeError("timeout", "timeout after 1.0 s"))
    scrapes = Scrapes(loop, {"vllm": get_profile("vllm")}, new_metrics())
    pod = PodRecord(0, 0.0, timeouts=3, deadline_s=1.0)
    assert asyncio.run(scrapes.on_loop(TARGET, pod))[0] == "timeout"
    assert pod.scrape_detail == ("timeout after 1.0 s (a shortened deadline: its last 3 scrapes timed out; "
                                 "every 4th cycle it gets the full deadline)")
    pod.deadline_s = None
    asyncio.run(scrapes.on_loop(TARGET, pod))
    assert loop.deadlines == [1.0, None] and pod.scrape_detail == "timeout after 1.0 s"


class Fetcher:
    """A Fetcher without a loop (the threaded path) whose fetch moves ``clock`` by ``wait`` first."""

    def __init__(self, clock: list[float], wait: float) -> None:
        self.clock, self.wait = clock, wait

    def fetch(self, url: str) -> bytes:
        self.clock[0] += self.wait
        return BODY

    def close(self) -> None: ...


@pytest.mark.parametrize("threaded", [True, False])
def test_a_pods_read_at_is_when_its_body_arrived_on_either_path(threaded: bool) -> None:
    now = [100.0]
    pod = PodRecord(0, 0.0)
    if threaded:
        scrapes = Scrapes(Fetcher(now, 2.5), {"vllm": get_profile("vllm")}, new_metrics(), clock=lambda: now[0])
        result, _ = scrapes.timed(TARGET, pod)
    else:
        class Late(Loop):
            async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
                now[0] += 2.5
                return BODY

        scrapes = Scrapes(Late(BODY), {"vllm": get_profile("vllm")}, new_metrics(), clock=lambda: now[0])
        result, _ = asyncio.run(scrapes.on_loop(TARGET, pod))
    assert result == "ok" and pod.read_at == 102.5
