"""Command line: the verbs ``replay``, ``check``, ``run``, ``status`` and ``demo``.

Only argument parsing and exit codes live in this package (one module per verb); each verb imports what does
the work inside its handler, so ``replay`` and ``check`` never load the Kubernetes client or the scheduler.
Exit codes: 0 ok, 1 the verb ran but found a problem it reports (e.g. ``check``
found none of the profile's metrics, ``demo`` did not end as expected), 2 bad usage or unreadable input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from watchdog import __version__

EPILOG = """\
verbs:
  replay   run the stall detector over a recorded CSV trace (offline, no cluster)
  check    scrape one /metrics endpoint (URL, file or stdin) and show the engine series found
  run      the watchdog itself: discover pods, scrape, detect, delete wedged pods + Events
  status   ask a running watchdog what it thinks: engine states, budget left, breaker, brake (GET /status)
  demo     run the real watchdog against an embedded Kubernetes API emulator and 4 simulated vLLM pods

'python -m watchdog VERB --help' explains each verb.
"""


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-watchdog",
        description="Finds vLLM inference pods whose engine silently wedged (requests running, token counters "
        "frozen for a window) and deletes them so their controller replaces them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")

    from watchdog.cli import check, demo, replay, run, status

    for module in (replay, check, run, status, demo):
        module.add_parser(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the verb, return its exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `replay ... | head`: the reader left; no traceback, no further writes
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
