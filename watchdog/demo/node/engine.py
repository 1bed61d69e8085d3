"""The simulated-engine image's entrypoint (``python -m watchdog.demo.node.engine``): one simulated vLLM server
(watchdog.demo.simpod) listening on the pod's own IP (all addresses of its network namespace), until SIGTERM,
which it logs and answers by exiting 0 after a short drain. ``--mode`` as the demo's simpod;
``POST /sim/mode?mode=wedged`` switches it at run time."""

import argparse
import signal
import sys
import threading
import time

from watchdog.demo.simpod.engine import MODES
from watchdog.demo.simpod.pod import SimPod


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m watchdog.demo.node.engine")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--mode", choices=MODES, default="progressing")
    parser.add_argument("--wedge-after", type=float, default=5.0)
    parser.add_argument("--drain-seconds", type=float, default=1.0)
    args = parser.parse_args()
    # In a pod the network namespace is the pod's own: listen on every address of it (the pod IP included), which
    # SimPod allows only when asked (listen_any; loopback is its default, the rule on a host).
    pod = SimPod("0.0.0.0", args.port, args.mode, wedge_after_s=args.wedge_after, listen_any=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"engine: serving on {pod.start()} mode={args.mode}", flush=True)
    beat = 0
    while not stop.wait(1.0):
        beat += 1
        if beat % 2 == 0:
            print(f"engine: step {beat} mode={pod.effective_mode()} scrapes={pod.scrapes}", flush=True)
    print(f"engine: SIGTERM received, draining {args.drain_seconds}s", flush=True)
    time.sleep(args.drain_seconds)
    pod.stop()
    print("engine: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
