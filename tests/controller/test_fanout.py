"""The scrape fan-out: workers sized by the fleet (``workers: 0``), slowest pods first, a fixed size kept."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import builders
import pytest

from watchdog.controller.fanout import AUTO_BASE, AUTO_MAX, Fanout, auto_workers, scrape_deadline, slow_seconds
from watchdog.controller.state import PodRecord
from watchdog.core.model import WatchedPod


def target(i: int) -> WatchedPod:
    return WatchedPod(uid=f"uid-{i}", namespace="llm", name=f"pod-{i}", ip=f"10.0.{i // 250}.{i % 250}", port=8000,
                      path="/metrics", target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


def jobs(seconds: list[float]) -> list[tuple[WatchedPod, PodRecord]]:
    return [(target(i), PodRecord(0, 0.0, scrape_seconds=s)) for i, s in enumerate(seconds)]


def test_auto_size_counts_the_pods_that_held_a_worker_long() -> None:
    healthy, slow, hung = [0.01] * 1880, [2.0] * 100, [3.0] * 20
    assert auto_workers(healthy + slow + hung, deadline_s=3.0) == AUTO_BASE + 120 == 136
    assert auto_workers(healthy, deadline_s=3.0) == AUTO_BASE
    assert auto_workers([0.01] * 5, deadline_s=3.0) == 5  # never more workers than pods
    assert auto_workers([], deadline_s=3.0) == 1
    assert auto_workers([3.0] * 1000, deadline_s=3.0) == AUTO_MAX == 768  # bounded, even when everything hangs
    # 10,000 pods of which 600 slow or hung: every one of those in flight at once, and 16 for the prompt ones
    assert auto_workers([0.01] * 9400 + [2.0] * 500 + [3.0] * 100, deadline_s=3.0) == AUTO_BASE + 600


def test_auto_size_before_anything_is_known() -> None:
    assert auto_workers([0.0] * 2000, deadline_s=3.0) == AUTO_BASE + 125  # 1 in 16 new pods may be slow
    assert auto_workers([0.0] * 10, deadline_s=3.0) == 10


def test_slow_is_relative_to_a_short_deadline() -> None:
    assert slow_seconds(3.0) == 1.0 and slow_seconds(0.5) == 0.25
    assert auto_workers([0.3] * 40 + [0.01] * 100, deadline_s=0.5) == AUTO_BASE + 40
    assert auto_workers([0.3] * 40 + [0.01] * 100, deadline_s=3.0) == AUTO_BASE


class Loop:
    """An AsyncFetcher's loop part (the fan-out needs only ``run``): the real AsyncScraper's."""

    def __init__(self) -> None:
        self.scraper = builders.scraper()

    def fetch(self, url: str) -> bytes:
        raise AssertionError("not called")

    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
        raise AssertionError("not called")

    def run(self, coro: Coroutine[Any, Any, R]) -> Future[R]:
        return self.scraper.run(coro)

    def close(self) -> None:
        self.scraper.close()


R = TypeVar("R")


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_on_the_loop_slowest_first_and_at_most_the_pool_size_at_once(workers: int) -> None:
    fanout, loop = Fanout(workers, deadline_s=3.0), Loop()
    order: list[str] = []
    running = [0, 0]  # now, most at once

    async def scrape(t: WatchedPod, r: PodRecord, deadline_s: float | None) -> str:
        running[0] += 1
        running[1] = max(running)
        order.append(t.uid)  # the order they start in
        await asyncio.sleep(0.01)
        running[0] -= 1
        return threading.current_thread().name

    try:
        seconds = [0.01, 2.5, 0.3, 3.0, 0.0] + [0.01] * 40
        results = fanout.gather(jobs(seconds), scrape, loop).result(5)  # one future for the whole fleet
        assert set(results) == {f"uid-{i}" for i in range(len(seconds))}
        assert set(results.values()) == {"scrape-loop"}  # every scrape on the one loop thread
    finally:
        loop.close()
    size = workers or auto_workers(seconds, 3.0)
    assert fanout.size == size and running[1] == min(size, len(seconds))
    assert order == ["uid-3", "uid-1", *(f"uid-{i}" for i in range(len(seconds)) if i not in (1, 3))]


def test_on_the_loop_slow_pods_do_not_hold_the_healthy_ones_back() -> None:
    fanout, loop = Fanout(0, deadline_s=1.0), Loop()
    done: dict[str, float] = {}
    start = time.monotonic()

    async def scrape(t: WatchedPod, r: PodRecord, deadline_s: float | None) -> None:
        await asyncio.sleep(0.5 if r.scrape_seconds >= 0.5 else 0.001)
        done[t.uid] = time.monotonic() - start

    try:
        fanout.gather(jobs([0.9] * 40 + [0.01] * 200), scrape, loop).result(10)
    finally:
        loop.close()
    assert fanout.size == AUTO_BASE + 40
    assert max(done.values()) < 1.0 and max(done[f"uid-{i}"] for i in range(40, 240)) < 0.45


def test_a_pod_that_keeps_timing_out_gets_a_short_deadline_but_the_full_one_every_4th_cycle() -> None:
    assert [scrape_deadline(timeouts, 1, 3.0) for timeouts in range(5)] == [None, None, 1.0, 1.0, 1.0]
    assert [scrape_deadline(7, cycle, 3.0) for cycle in range(1, 10)] == [1.0, 1.0, 1.0, None] * 2 + [1.0]
    assert scrape_deadline(2, 1, 1.0) == 0.5 and scrape_deadline(2, 1, 0.2) == 0.1  # never the full one


def test_on_the_loop_each_cycle_sets_the_deadlines_of_its_pods() -> None:
    fanout, loop = Fanout(0, deadline_s=3.0), Loop()
    batch = jobs([0.01, 3.0, 3.0])
    for (_, record), timeouts in zip(batch, [0, 1, 2], strict=True):
        record.timeouts = timeouts
    seen: list[list[float | None]] = []

    async def scrape(t: WatchedPod, r: PodRecord, deadline_s: float | None) -> float | None:
        return deadline_s

    try:
        for _ in range(4):
            deadlines = fanout.gather(batch, scrape, loop).result(5)
            seen.append([deadlines[t.uid] for t, _ in batch])
    finally:
        loop.close()
    assert seen == [[None, None, 1.0]] * 3 + [[None, None, None]]  # the 4th cycle: the full deadline for every pod


def test_fixed_workers_are_kept() -> None:
    fanout, loop = Fanout(7, deadline_s=3.0), Loop()

    async def scrape(t: WatchedPod, r: PodRecord, deadline_s: float | None) -> str:
        return t.uid

    try:
        results = fanout.gather(jobs([3.0] * 50 + [0.01] * 5), scrape, loop).result(5)
    finally:
        loop.close()
    assert fanout.size == 7
    assert results == {f"uid-{i}": f"uid-{i}" for i in range(55)}
