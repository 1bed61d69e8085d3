"""``replay``: run the stall detector over a recorded CSV trace, or over recorded ``/metrics`` bodies, offline.

The CSV format (one row per scrape of one engine series, in time order) is described in
:mod:`watchdog.core.trace`; ``--expositions DIR`` in :mod:`watchdog.cli.expositions`. Output: one JSON object
per row (CSV) or per file and engine series (expositions) on stdout with ``t``, ``state``, ``stalled``,
``stalled_for_s`` and ``reason``. Bad input (unreadable file, missing column, non-numeric cell, a file not
named ``<seconds>.prom``) gives one line on stderr naming file, line and column, and exit status 2; nothing
is printed for a CSV file that does not read cleanly.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from importlib import resources
from typing import Any

from watchdog.cli.argtypes import positive_int, positive_seconds, refuse
from watchdog.cli.configtarget import TARGET_HELP, chosen_target, profile_of
from watchdog.config.settings import completion_window_problem
from watchdog.core.detector import DEFAULT_MIN_SAMPLES, DEFAULT_WINDOW_S
from watchdog.core.profiles import PROFILES
from watchdog.core.trace import Trace, TraceError, decode_trace, read_trace, replay

__all__ = ["EXAMPLE", "Trace", "TraceError", "add_parser", "open_trace", "read_trace", "replay", "run_replay"]
EXAMPLE = "example:seed-incident"
PROG = "vllm-watchdog replay"

HELP = """\
Replay a recorded trace through the stall detector and print the verdict after every row.

Two inputs:
  TRACE                 a CSV trace of ONE engine series (below)
  --expositions DIR     /metrics bodies recorded during an incident, one file per scrape named
                        <seconds>.prom (integer or decimal seconds on one clock, read in numeric order),
                        e.g.: while sleep 15; do curl -s http://POD_IP:8000/metrics > "$(date +%s).prom"; done
                        Every body goes through what `run` does with a scrape (size bound, parser,
                        detector) with --profile, or with a custom profile: --config FILE [--target NAME]
                        (the watchdog's config file); one JSON object per file and engine series.

--config FILE [--target NAME ...] (either input) judges with that target's effective policy: its own
windowSeconds, minSamples and completionOnlyWindowSeconds, else the file's global ones (printed on stderr). A pod
several targets' podSelectors match: give each --target; the one run judges it by is used (the longest window).

CSV format: a header row, then one row per scrape of ONE engine series, in time order.
  required columns  t, running, and at least one progress column
  progress columns  counters generation_tokens, prompt_tokens, heartbeat, progress_<name>;
                    the gauge kv_cache_usage (any change is progress)
  optional columns  waiting; paused (> 0: the engine sleeps or was paused on purpose, never stalled)
  t                 seconds on any monotonic origin (e.g. 0, 15, 30, ...)
  empty cell        unknown (failed scrape or missing metric): never evidence of a stall
  other columns     ignored (a note goes to stderr)

Output: one JSON object per row (--expositions adds "series", the engine's labels):
  {"t": 360.0, "state": "stalled", "stalled": true, "stalled_for_s": 120.0, "reason": "stalled: 21 ..."}
state is one of idle, paused, progressing, suspect, stalled, unknown.

TRACE may be a file path, '-' for stdin, or 'example:seed-incident' for the bundled trace of the seed
incident (21 requests running, token counters frozen).

Exit status: 0 replayed; 1 (--expositions) no engine series of the profile in any file (wrong --profile?);
2 bad usage or bad input (one line naming file, line and column).
"""


def open_trace(source: str) -> Trace:
    """Read the trace named by ``source``: a path, ``-`` (stdin) or ``example:seed-incident``. The bytes are
    decoded here, whole, so that a byte that is not UTF-8 is reported on its own line and column."""
    if source == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:  # already text (a test's StringIO)
            return read_trace(sys.stdin, "<stdin>")
        return _from_bytes(stdin.read(), "<stdin>")
    if source == EXAMPLE:
        return _from_bytes(resources.files("watchdog").joinpath("examples/seed-incident.csv").read_bytes(), EXAMPLE)
    try:
        with open(source, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        raise TraceError(f"{source}: cannot read: {exc.strerror or exc}") from None
    return _from_bytes(data, source)


def _from_bytes(data: bytes, name: str) -> Trace:
    # newline="": lines end at \r\n, \r or \n, as the csv module expects (and as open(newline="") gave).
    return read_trace(io.StringIO(decode_trace(data, name), newline=""), name)


def run_replay(args: argparse.Namespace) -> int:
    """The ``replay`` verb: exit 0 after printing every verdict, 2 on bad input."""
    if (args.trace is None) == (args.expositions is None):
        return refuse(PROG, "give either TRACE or --expositions DIR (see --help)")
    try:
        _judge_with(args)
    except ValueError as exc:
        return refuse(PROG, str(exc))
    window = args.completion_only_window
    if problem := completion_window_problem(window, args.window, "--completion-only-window", "--window"):
        return refuse(PROG, f"{problem} (the rule of the setting completionOnlyWindowSeconds)")
    if args.expositions is not None:
        return _replay_expositions(args)
    if args.profile is not None:
        return refuse(PROG, "--profile applies to --expositions only (a CSV names its columns)")
    try:
        trace = open_trace(args.trace)
    except TraceError as exc:
        return refuse(PROG, str(exc))
    note = f"{PROG}: note:"
    if trace.ignored_columns:
        print(f"{note} ignoring column(s) {', '.join(trace.ignored_columns)}", file=sys.stderr)
    if not trace.samples:
        print(f"{note} {args.trace} has a header but no rows", file=sys.stderr)
    for line in trace.backwards_lines[:5]:
        print(f"{note} line {line}: t goes backwards (a clock reset?): the detector starts over there",
              file=sys.stderr)
    for row in replay(trace, args.window, args.min_samples, args.count_waiting, args.completion_only_window):
        print(json.dumps(row))
    return 0


def _replay_expositions(args: argparse.Namespace) -> int:
    from watchdog.cli.expositions import list_expositions, replay_expositions

    def note(text: str) -> None:
        print(f"{PROG}: note: {text}", file=sys.stderr)

    try:
        profile = profile_of(args.chosen, args.profile)
        scrapes = list_expositions(args.expositions)
        rows = 0
        for row in replay_expositions(scrapes, profile, args.window, args.min_samples, args.count_waiting,
                                      args.completion_only_window, note):
            print(json.dumps(row))
            rows += 1
    except (TraceError, ValueError) as exc:
        return refuse(PROG, str(exc))
    if not rows:
        print(f"{PROG}: no engine series of the {profile.name} profile ({', '.join(profile.metric_names()[:3])}, "
              f"...) in any of the {len(scrapes)} files: wrong --profile, or metrics off in the engine?",
              file=sys.stderr)
        return 1
    return 0


def _judge_with(args: argparse.Namespace) -> None:
    """Fill in the policy the trace is judged with: the effective policy of the --config target (printed on
    stderr; a flag given as well wins over it), else the flags or their defaults; raises ValueError (one line) on
    a bad --config or target."""
    args.chosen = chosen_target(args.config, args.target, args.profile is not None)
    if args.chosen is not None:
        config, target = args.chosen.config, args.chosen.target
        policy = config.policy_of(target)[0]
        given = [flag for flag, value in (("--window", args.window), ("--min-samples", args.min_samples),
                                          ("--completion-only-window", args.completion_only_window))
                 if value is not None]
        print(args.chosen.notes(PROG, policy.describe() + (f" ({', '.join(given)} given: the flag wins)" if given
                                                           else "")), file=sys.stderr)
        args.window = policy.window_s if args.window is None else args.window
        args.min_samples = policy.min_samples if args.min_samples is None else args.min_samples
        if args.completion_only_window is None:
            args.completion_only_window = policy.completion_only_window_s or None
        args.count_waiting = args.count_waiting or config.count_waiting
    args.window = DEFAULT_WINDOW_S if args.window is None else args.window
    args.min_samples = DEFAULT_MIN_SAMPLES if args.min_samples is None else args.min_samples


def add_parser(verbs: Any) -> None:
    """Register the ``replay`` verb on an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "replay", help="run the stall detector over a recorded CSV trace",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE", nargs="?",
                   help="CSV file, '-' for stdin, or example:seed-incident (or use --expositions)")
    p.add_argument("--expositions", metavar="DIR",
                   help="replay recorded /metrics bodies, one <seconds>.prom file per scrape, instead of a CSV")
    p.add_argument("--profile", choices=sorted(PROFILES), default=None,
                   help="with --expositions: which engine's series to read (default: vllm)")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="judge with the effective policy (window, min samples, completion-only window) of a target "
                        "of this watchdog config file, printed on stderr; with --expositions also read that "
                        "target's series (custom profiles too) instead of --profile")
    p.add_argument("--target", metavar="NAME", action="append", default=None, help=TARGET_HELP)
    p.add_argument("--window", type=positive_seconds, default=None, metavar="SECONDS",
                   help=f"how long a busy engine may show no progress before it is stalled (default: "
                        f"{DEFAULT_WINDOW_S:g})")
    p.add_argument("--min-samples", type=positive_int, default=None, metavar="N",
                   help=f"known busy samples needed inside the window (default: {DEFAULT_MIN_SAMPLES})")
    p.add_argument("--completion-only-window", type=positive_seconds, default=None, metavar="SECONDS",
                   help="judge engines whose only progress signals move when a request finishes with this window "
                        "(as the setting completionOnlyWindowSeconds; default: such engines are unknown)")
    p.add_argument("--count-waiting", action="store_true",
                   help="count waiting requests as busy too (for engines that report running 0 while wedged)")
    p.set_defaults(handler=run_replay)

