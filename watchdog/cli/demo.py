"""``demo``: argument parsing for the embedded demo (:mod:`watchdog.demo.runner` tells the story)."""

from __future__ import annotations

import argparse
from typing import Any

from watchdog.cli.argtypes import non_negative_seconds, positive_seconds, seconds_between

HELP = """\
Run the real watchdog against an embedded Kubernetes API emulator (kmock; not a real cluster) and four
simulated vLLM pods on 127.0.0.2-5:

  busy       20 requests running, token counters rising         -> must be kept
  idle       nothing running, counters flat                     -> must be kept (idle is never stalled)
  prefill    1 request in a long prefill, only the heartbeat    -> must be kept
             (vllm:iteration_tokens_total_count) moves
  wedge      serves normally, then wedges after --wedge-after s -> must be deleted, with Events on the pod
             (21 running, every counter frozen, /health 200)       and on its Deployment

Exit status: 0 when exactly the wedged pod was deleted with its Events; 1 otherwise; 2 when the demo extra
is not installed (pip install -e '.[demo]').
"""


def add_parser(verbs: Any) -> None:
    """Register the ``demo`` verb."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "demo", help="the watchdog against an embedded API emulator and 4 simulated vLLM pods",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    # >= 3 s: the demo scrapes every min(1, window/3) s, and the watchdog refuses intervals below 1 s
    p.add_argument("--window", type=seconds_between(3.0, 3600.0, low_inclusive=True), default=5.0,
                   metavar="SECONDS", help="stall window, 3-3600 (default: 5)")
    p.add_argument("--wedge-after", type=non_negative_seconds, default=3.0, metavar="SECONDS",
                   help="seconds before the wedge pod freezes (default: 3)")
    p.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="SECONDS",
                   help="give up after this long (default: 60)")
    p.add_argument("--verbose", action="store_true", help="print every watchdog log line")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from watchdog.demo.runner import run_demo  # heavy (emulator, simulated pods): only when the verb runs

    return run_demo(args)
