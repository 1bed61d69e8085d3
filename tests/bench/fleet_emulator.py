"""The project's Kubernetes API emulator (``watchdog.demo.emulator``; kmock-based, NOT a real cluster) for
``bench_fleet.py``, with one benchmark-only change: kmock's own request history is dropped after each request.

Why: kmock keeps every request it ever served and, to pick a reaction for a new one, runs its filters over
all of them (``request in payload._source``), so each request costs O(requests so far) -- 300 pod creations
already took 45 s. The project's ``request_log`` (what the tests count API calls with) is kept as it is;
only kmock's internal lists, which nothing in the project reads, are cleared.

``python tests/bench/fleet_emulator.py``: prints ``emulator listening on URL`` and serves on 127.0.0.1 until
its stdin closes (the benchmark exited) or SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

from watchdog.demo.emulator import EmulatorServer, KubeEmulator


@attrs.define(kw_only=True)
class FleetEmulator(KubeEmulator):
    async def _handle(self, request: Any) -> Any:
        try:
            return await super()._handle(request)
        finally:
            del self._requests[:]
            for payload in self._payloads:
                del payload._requests[:]


def main() -> int:
    server = EmulatorServer("127.0.0.1", 0)
    server.emulator = FleetEmulator()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()
    with server:
        print(f"emulator listening on {server.base_url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
