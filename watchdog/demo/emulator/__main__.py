"""``python -m watchdog.demo.emulator``: serve the emulator until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from watchdog.demo.emulator.server import EmulatorServer


def main(argv: list[str] | None = None) -> int:
    """``python -m watchdog.demo.emulator --port N``: serve until SIGTERM/SIGINT; prints the URL when ready."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m watchdog.demo.emulator",
                                     description="Kubernetes API emulator (kmock-based; not a real cluster).")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port, printed)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with EmulatorServer(args.host, args.port) as server:
        print(f"emulator listening on {server.base_url}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
