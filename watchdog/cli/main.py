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
from typing import TYPE_CHECKING, Any, NoReturn

from watchdog import __version__

if TYPE_CHECKING:
    from watchdog.config.settings import Setting

EPILOG = """\
verbs:
  replay   run the stall detector over a recorded CSV trace (offline, no cluster)
  check    scrape one /metrics endpoint (URL, file or stdin) and show the engine series found
  run      the watchdog itself: discover pods, scrape, detect, delete wedged pods + Events
  status   ask a running watchdog what it thinks: engine states, budget left, breaker, brake (GET /status)
  demo     run the real watchdog against an embedded Kubernetes API emulator and 4 simulated vLLM pods

'python -m watchdog VERB --help' explains each verb.
"""


class UsageError(Exception):
    """A command line argparse refused: ``parser`` (whose usage applies) and the one-line ``message``."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing and exiting (its verbs' parsers too), so
    :func:`main` says it the way the verb promises: ``run`` as its one fatal log line, the others as argparse
    does. No abbreviations (its verbs' parsers are of this class too): ``--dry`` or ``--window`` in ``extraArgs``
    would otherwise pass silently as ``--dry-run`` or ``--window-seconds``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        _refuse(exc, argv)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.handler(args))
    except UsageError as exc:  # a verb's own check of its arguments (parser.error after parsing)
        _refuse(exc, argv)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `replay ... | head`: the reader left; no traceback, no further writes
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _refuse(exc: UsageError, argv: list[str]) -> NoReturn:
    """Exit (SystemExit 2, as argparse) for a refused command line. ``run`` says it as its other start-up errors:
    one line on stderr in the log format asked for by --log-format or WATCHDOG_LOG_FORMAT (json by default:
    "level": "error", "reason": "usage"), since that is what a Deployment's extraArgs mistake must show in
    ``kubectl logs``; the other verbs, for a person at a terminal, print argparse's usage and the error."""
    if next((a for a in argv if not a.startswith("-")), None) != "run":
        exc.parser.print_usage(sys.stderr)
        exc.parser.exit(2, f"{exc.parser.prog}: error: {exc}\n")
    import logging

    from watchdog.adapters.logs import setup_logging
    from watchdog.config.settings import BY_NAME

    setup_logging(_log_format(argv, BY_NAME["log_format"]), BY_NAME["log_level"].default)
    logging.getLogger("watchdog.cli.run").error("command line refused: %s (see: vllm-watchdog run --help)", exc,
                                                extra={"reason": "usage"})
    raise SystemExit(2)


def _log_format(argv: list[str], setting: Setting) -> str:
    """The log format the refused command line asked for, as far as it can be read (else the setting's default)."""
    asked = os.environ.get(setting.env, setting.default)
    for i, arg in enumerate(argv):
        if arg.startswith("--log-format="):
            asked = arg.partition("=")[2]
        elif arg == "--log-format" and i + 1 < len(argv):
            asked = argv[i + 1]
    return asked if asked in setting.choices else str(setting.default)


if __name__ == "__main__":
    sys.exit(main())
