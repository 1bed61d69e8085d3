"""A watchdog's HTTP endpoints served on loopback, for the tests that read them from the same process
(tests/cli/test_status.py, test_status_ready.py, tests/controller/test_service.py, test_http.py,
tests/chart/test_helm_test_hook.py), and whether this kernel has an IPv6 loopback to serve on. Not a test module:
test modules import from here, never from each other."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from watchdog.controller.cycle import Watchdog
from watchdog.controller.http import HttpServer, start_http


@contextlib.contextmanager
def serving(wd: Watchdog, interval_s: float) -> Iterator[HttpServer]:
    """``wd``'s endpoints (``start_http``, ``interval_s`` its cycle interval) on 127.0.0.1, a free port, for the
    block; then the server is shut down and ``wd`` closed."""
    server = start_http("127.0.0.1:0", wd, interval_s)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        wd.close()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False
