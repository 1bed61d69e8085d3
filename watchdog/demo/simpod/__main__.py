"""``python -m watchdog.demo.simpod``: serve one simulated pod until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from watchdog.demo.simpod.engine import DEFAULT_MODEL, MODES
from watchdog.demo.simpod.pod import FLAVORS, SimPod


def main(argv: list[str] | None = None) -> int:
    """``python -m watchdog.demo.simpod --address 127.0.0.2 --port 8000 --mode wedge_after --wedge-after 5``."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m watchdog.demo.simpod",
                                     description="Serve a simulated vLLM (or SGLang) pod's /metrics and /health "
                                                 "on loopback.")
    parser.add_argument("--address", default="127.0.0.2", help="loopback address to bind (127.0.0.0/8)")
    parser.add_argument("--listen-any", action="store_true",
                        help="accept any --address (0.0.0.0 included): only inside a container's own network "
                             "namespace, where the pod IP lives")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed)")
    parser.add_argument("--mode", choices=MODES, default="progressing")
    parser.add_argument("--wedge-after", type=float, default=5.0, help="seconds of progress before wedging")
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines (series per engine)")
    parser.add_argument("--model-name", default=DEFAULT_MODEL)
    parser.add_argument("--flavor", choices=FLAVORS, default="vllm", help="whose metrics to serve")
    args = parser.parse_args(argv)
    pod = SimPod(args.address, args.port, args.mode, engines=args.engines, model_name=args.model_name,
                 wedge_after_s=args.wedge_after, flavor=args.flavor, listen_any=args.listen_any)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"simpod listening on {pod.start()} mode={args.mode}", flush=True)
    while not stop.wait(0.5):
        pass
    pod.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
