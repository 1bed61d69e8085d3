"""The deadline guard every scrape, Prometheus query and pod-log read arms: it fires at the deadline, shuts down
what it is attached to, and its one thread survives whatever that shutdown raises."""

from __future__ import annotations

import socket
import time

from watchdog.adapters.deadline import DEADLINES, DeadlineGuard


class Response:
    def __init__(self, fails: bool = False) -> None:
        self.fails, self.shut = fails, False

    def shutdown(self) -> None:
        self.shut = True
        if self.fails:
            raise RuntimeError("not a socket after all")


def fired(guard: DeadlineGuard, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not guard.fired and time.monotonic() < deadline:
        time.sleep(0.01)
    return guard.fired


def test_a_guard_shuts_a_socket_or_a_response_down_at_its_deadline() -> None:
    left, right = socket.socketpair()
    with left, right:
        guard = DeadlineGuard(time.monotonic() + 0.05)
        guard.attach(left)
        assert fired(guard) and left.recv(1) == b""  # shut down: a blocked read would wake with EOF
    response = Response()
    guard = DeadlineGuard(time.monotonic() + 0.05)
    guard.attach(response)
    assert fired(guard) and response.shut


def test_a_shutdown_that_raises_never_stops_the_thread_that_fires_every_guard() -> None:
    bad = DeadlineGuard(time.monotonic() + 0.02)
    bad.attach(Response(fails=True))
    assert fired(bad)
    good, response = DeadlineGuard(time.monotonic() + 0.05), Response()
    good.attach(response)
    assert fired(good) and response.shut and DEADLINES._thread.is_alive()


def test_a_disarmed_guard_does_nothing() -> None:
    guard, response = DeadlineGuard(time.monotonic() + 0.02), Response()
    guard.attach(response)
    guard.disarm()
    time.sleep(0.1)
    assert not guard.fired and not response.shut


def test_disarmed_guards_cost_no_wake_up_of_their_own() -> None:
    """The fetches that finish long before their deadline (nearly all of them) leave the heap the next time the
    thread wakes: it sleeps until the earliest guard still armed, not until each of their deadlines."""
    keeper = DeadlineGuard(time.monotonic() + 0.05)  # wakes the thread once, after the guards below are disarmed
    start = time.monotonic()
    guards = [DeadlineGuard(start + 0.06 + i * 0.001) for i in range(200)]  # 200 distinct deadlines within 0.3 s
    for guard in guards:
        guard.disarm()
    last = DeadlineGuard(start + 0.5)
    assert fired(keeper)
    woken = DEADLINES.wakeups
    assert fired(last)
    assert DEADLINES.wakeups - woken <= 3  # one per disarmed guard before: about 200
    assert not any(guard.fired for guard in guards)
