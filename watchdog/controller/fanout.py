"""The cycle's scrape fan-out: how many scrapes run at once, and in which order.

Every scrape is a coroutine on the scraper's event loop (:meth:`Fanout.gather`), run by one of the fan-out's
"workers" (a task per scrape allowed in flight at once, each taking the next pod as soon as it is free: a task and a
semaphore per pod cost ~3% of a 10,000-pod cycle's CPU, the semaphore's wake-up scanning the woken waiters). A
scrape of a hung pod holds its worker until the deadline, a slow pod's until it answers; the healthy pods, which
answer in milliseconds, must not queue behind them. So:

- **Slowest first**, by each pod's scrape time last cycle: a pod that hangs until the deadline overlaps with
  the fast ones instead of adding its deadline to the end of the cycle. The prompt pods (under
  :func:`slow_seconds`) then keep the order they are given (discovery's), the same every cycle: a pod's body
  arrives at about the same moment of each cycle, and that moment is its sample's time (``cycle.py``).
- **Sized by the fleet** (``workers: 0``, the default): each cycle runs :data:`AUTO_BASE` workers for the pods
  that answer promptly, plus one per pod that may hold a worker for long -- every pod whose last scrape took at
  least :func:`slow_seconds` (slow, hung or timing out: known from last cycle), and one per
  :data:`NEW_PER_WORKER` pods never scraped yet (at start-up nothing is known) -- at most :data:`AUTO_MAX` and
  never more than the pods. 2,000 pods of which 120 are slow or hung: 136 workers; 100 healthy pods: 16.
  A fixed ``workers: N`` keeps N. A slow pod's scrape mostly waits, holding a socket and a coroutine: the bound is
  the open files, not the CPU. When it was 256 (a thread each, once), 10,000 pods of which 600 were slow queued
  the prompt pods behind three waves of slow ones (cycle 7.7 s; docs/scaling.md).

The same sizing holds on the loop as a cap on memory (64 prompt scrapes at once made the loop's GET cheaper,
0.62 -> 0.45 ms CPU at 400 loopback pods, but peak RSS at 2,000 pods 92 -> 111 MiB, over its goal): no more bodies
in memory at once than scrapes in flight (each is parsed on the loop as soon as it arrived).

- **Shorter deadlines for pods that keep timing out** (on the loop, :func:`scrape_deadline`): after 2 timed-out
  scrapes in a row a pod gets 1 s (half the deadline when that is shorter) instead of the full deadline, except
  on every 4th cycle, when every pod gets the full one. The cycle judges after its last scrape, so one hung pod
  held every pod's verdicts (and deletions) for the whole deadline; now only every 4th cycle is held that long.

A timeout is never evidence here either: sizing and deadlines only decide how long a scrape may wait and how
many wait at once, never what a scrape's outcome means (a timeout is unknown, whatever its deadline).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import TypeVar

from watchdog.controller.ports import AsyncFetcher
from watchdog.controller.state import PodRecord
from watchdog.core.model import WatchedPod

AUTO_BASE = 16  # scrapes at once for the prompt pods: keeps the one core busy while each waits ~5-15 ms
AUTO_MAX = 768  # a socket each: well under the usual soft limit of 1,024 open files (docs/scaling.md)
NEW_PER_WORKER = 16  # pods never scraped: assume 1 in 16 may be slow (the first cycle, a new rollout)

R = TypeVar("R")


def slow_seconds(deadline_s: float) -> float:
    """A scrape that took this long held its worker long enough to count as a slow pod (1 s, less with a short
    deadline)."""
    return min(1.0, deadline_s / 2)


SHORTEN_AFTER = 2  # consecutive timed-out scrapes before a pod's deadline is shortened
FULL_EVERY = 4  # every 4th cycle, every pod's scrape gets the full deadline


def scrape_deadline(timeouts: int, cycle: int, deadline_s: float) -> float | None:
    """The deadline of a pod's scrape this ``cycle`` (a count) when shorter than ``deadline_s``, else None.

    A pod whose last :data:`SHORTEN_AFTER` scrapes or more timed out (``timeouts``: in a row) gets
    :func:`slow_seconds` (1 s at the default 3 s), so that a hung pod does not hold every cycle's verdicts for the
    whole deadline; except on every :data:`FULL_EVERY`-th cycle -- the same cycle for every pod, so that the others
    are not held -- when it gets the full deadline: a pod that answers again, only slowly, answers then, and one
    answer in time restores its deadline. A timeout is unknown either way, never evidence."""
    if timeouts < SHORTEN_AFTER or cycle % FULL_EVERY == 0:
        return None
    short = slow_seconds(deadline_s)
    return short if short < deadline_s else None


def order(jobs: Sequence[tuple[WatchedPod, PodRecord]], deadline_s: float
          ) -> list[tuple[WatchedPod, PodRecord]]:
    """``jobs`` in the order their scrapes start: the slow pods by last cycle's scrape time, slowest first, then
    the prompt ones as given (see the module docstring)."""
    slow = slow_seconds(deadline_s)
    return sorted(jobs, key=lambda job: -job[1].scrape_seconds if job[1].scrape_seconds >= slow else 0.0)


def auto_workers(last_seconds: Sequence[float], deadline_s: float) -> int:
    """Workers for one cycle from each pod's last scrape time in seconds (0.0: never scraped)."""
    if not last_seconds:
        return 1
    threshold = slow_seconds(deadline_s)
    slow = sum(1 for s in last_seconds if s >= threshold)
    new = sum(1 for s in last_seconds if s == 0.0)
    wanted = AUTO_BASE + slow + math.ceil(new / NEW_PER_WORKER)
    return max(1, min(wanted, AUTO_MAX, len(last_seconds)))


class Fanout:
    """Runs one cycle's scrapes on the scraper's loop, as many at once as sized above (``workers`` 0: auto), in that
    order."""

    def __init__(self, workers: int, deadline_s: float) -> None:
        self.fixed = workers
        self.deadline_s = deadline_s
        self.size = 0  # how many scrapes ran at once last cycle (0: none yet)
        self.cycles = 0  # batches run (the cycle count of scrape_deadline)

    def gather(self, jobs: Sequence[tuple[WatchedPod, PodRecord]],
               scrape: Callable[[WatchedPod, PodRecord, float | None], Awaitable[R]], loop: AsyncFetcher
               ) -> Future[dict[str, R]]:
        """Run the coroutine ``scrape(target, record, deadline_s)`` of every job on ``loop``, slowest first, as many
        at once as the fan-out's size (the ``workers`` setting, or :func:`auto_workers`); ONE future, of every result
        by pod UID (the cycle wakes once, not once per pod: each wake-up of the waiting cycle took the GIL from the
        loop). ``deadline_s``: this cycle's :func:`scrape_deadline` of the job's pod."""
        self.cycles += 1
        last = [record.scrape_seconds for _, record in jobs]
        self.size = self.fixed or auto_workers(last, self.deadline_s)
        ordered = order(jobs, self.deadline_s)
        cycle, deadline_s = self.cycles, self.deadline_s

        async def every() -> dict[str, R]:
            pending, results = iter(ordered), {}

            async def worker() -> None:  # takes the next pod as soon as it is free: they start in ordered's order
                for target, record in pending:
                    results[target.uid] = await scrape(target, record, scrape_deadline(record.timeouts, cycle,
                                                                                       deadline_s))

            await asyncio.gather(*(worker() for _ in range(min(self.size, len(ordered)))))
            return {target.uid: results[target.uid] for target, _ in ordered}

        return loop.run(every())
