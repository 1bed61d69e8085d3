"""The total deadline of one Prometheus query (or pod-log read), enforced while streaming.

A per-read timeout alone restarts with every dripped byte, so a server sending one byte a second never times
out. Each fetch arms a :class:`DeadlineGuard`; one thread (:data:`DEADLINES`) fires every guard at its deadline
and shuts the socket of that fetch down, which wakes any blocked read. The Prometheus client attaches its
connection's socket once connected; the pod-log read attaches its urllib3 response. (The scrape transport,
:mod:`watchdog.adapters.ascrape`, bounds each scrape on its event loop instead.)
"""

from __future__ import annotations

import contextlib
import heapq
import socket
import threading
import time
from typing import Any


class DeadlineGuard:
    """Shuts down the socket of the current request when the deadline passes (armed per fetch). What it is attached
    to: the socket, or a urllib3 response (``shutdown()``: the socket it reads from, which a response whose
    connection was handed over to it no longer shows)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._sock: Any = None  # socket.socket or urllib3 HTTPResponse
        self._done = False
        self._lock = threading.Lock()
        DEADLINES.arm(self)

    def attach(self, sock: Any) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(Exception):  # best effort: nothing may stop the one thread firing every guard
                if isinstance(self._sock, socket.socket):
                    self._sock.shutdown(socket.SHUT_RDWR)
                else:
                    self._sock.shutdown()

    def disarm(self) -> None:
        with self._lock:
            self._done = True
            self._sock = None


class _Deadlines:
    """One thread fires every guard at its deadline (a Timer thread per fetch cost 30% of a scrape's CPU). When it
    wakes it also drops the disarmed guards at the head of its heap, whose deadlines are still to come: it then
    sleeps until the earliest guard still armed, not until each finished fetch's deadline (a wake-up per fetch,
    2,000 per cycle at 2,000 pods, each taking the GIL from the scrape threads)."""

    def __init__(self) -> None:
        self.wakeups = 0  # times the thread woke (for tests)
        self._heap: list[tuple[float, int, DeadlineGuard]] = []  # (deadline, id(guard), guard)
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="scrape-deadlines", daemon=True)

    def arm(self, guard: DeadlineGuard) -> None:
        with self._wake:
            heapq.heappush(self._heap, (guard.deadline, id(guard), guard))
            if not self._thread.is_alive():  # started by the first fetch
                self._thread.start()
            if self._heap[0][2] is guard:  # the earliest deadline now
                self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while True:
                self.wakeups += 1
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][2]._done):
                    heapq.heappop(self._heap)[2]._fire()  # a disarmed guard ignores it
                self._wake.wait(max(0.0, self._heap[0][0] - time.monotonic()) if self._heap else None)


DEADLINES = _Deadlines()
