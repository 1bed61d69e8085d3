"""One pod's scrape as the cycle sees it (watchdog/controller/scrapes.py): on the loop, a failure of any kind is that
pod's own outcome -- unknown, with why -- and never the batch's (one future for the whole fleet)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qs

import pytest

from watchdog.adapters.metrics import new_metrics
from watchdog.adapters.scrape_errors import ScrapeError
from watchdog.controller.fanout import Fanout
from watchdog.controller.scrapes import ScrapeSource
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
        self.urls: list[str] = []

    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
        self.deadlines.append(deadline_s)
        self.urls.append(url)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def fetch(self, url: str) -> bytes:
        raise AssertionError("not on the loop")

    def run(self, coro: Any) -> Any:
        raise AssertionError("not used")

    def close(self) -> None: ...


def source(loop: Loop, **kw: Any) -> ScrapeSource:
    return ScrapeSource(loop, Fanout(0, 3.0), {"vllm": get_profile("vllm")}, new_metrics(), **kw)


@pytest.mark.parametrize(("outcome", "expected", "detail"), [
    (BODY, "ok", ""),
    (ScrapeError("timeout", "timeout after 3 s"), "timeout", "timeout after 3 s"),
    (RuntimeError("a bug"), "connection", "scrape failed unexpectedly: RuntimeError: a bug"),
])
def test_on_the_loop_every_failure_is_the_pods_own_outcome(outcome: bytes | BaseException, expected: str,
                                                            detail: str) -> None:
    reading = asyncio.run(source(Loop(outcome)).read(TARGET, PodRecord(0, 0.0), None))
    assert reading.outcome == expected and reading.detail == detail
    assert (reading.parsed is not None) == (expected == "ok") and reading.seconds is not None and reading.seconds > 0


def test_on_the_loop_a_shortened_deadline_is_passed_on_and_named_in_the_detail() -> None:
    loop = Loop(ScrapeError("timeout", "timeout after 1.0 s"))
    scrapes = source(loop)
    pod = PodRecord(0, 0.0, timeouts=3)
    reading = asyncio.run(scrapes.read(TARGET, pod, 1.0))
    assert reading.outcome == "timeout"
    assert reading.detail == ("timeout after 1.0 s (a shortened deadline: its last 3 scrapes timed out; "
                              "every 4th cycle it gets the full deadline)")
    reading = asyncio.run(scrapes.read(TARGET, pod, None))
    assert loop.deadlines == [1.0, None] and reading.detail == "timeout after 1.0 s"


def test_a_pods_reading_is_timed_when_its_body_arrived() -> None:
    now = [100.0]

    class Late(Loop):
        async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
            now[0] += 2.5
            return BODY

    reading = asyncio.run(source(Late(BODY), clock=lambda: now[0]).read(TARGET, PodRecord(0, 0.0), None))
    assert reading.outcome == "ok" and reading.t == 102.5


def test_a_scrape_asks_for_the_profiles_sample_names_only() -> None:
    loop = Loop(BODY)
    asyncio.run(source(loop).read(TARGET, PodRecord(0, 0.0), None))
    (url,) = loop.urls
    path, _, query = url.partition("?")
    assert path == "http://10.0.0.1:8000/metrics"
    names = parse_qs(query)["name[]"]
    assert names == sorted(names) and len(names) == len(set(names))
    assert {"vllm:num_requests_running", "vllm:generation_tokens_total", "vllm:iteration_tokens_total_count",
            'vllm:engine_sleep_state'} <= set(names)
    assert "vllm:iteration_tokens_total_bucket" not in names  # nothing the parser does not read
