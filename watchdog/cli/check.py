"""``check``: scrape one ``/metrics`` endpoint (URL, file or stdin) and show the engine series found.

For trying the watchdog's eyes on a live server before deploying it: the same bounded scrape
(:mod:`watchdog.adapters.ascrape`, called synchronously) and the same parser (:mod:`watchdog.core.parsing`) as the
running watchdog.
Exit status: 0 at least one of the profile's metrics found, 1 none found, 2 bad usage or the target could not be read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from watchdog.adapters.scrape import redact
from watchdog.adapters.scrape_errors import ScrapeError, ScrapeLimits
from watchdog.cli import check_prometheus
from watchdog.cli.argtypes import positive_int, positive_seconds, refuse
from watchdog.cli.configtarget import TARGET_HELP, chosen_target, profile_of
from watchdog.config.settings import BY_NAME
from watchdog.core.confirm import known, live_evidence
from watchdog.core.parsing import ParseResult, parse_exposition
from watchdog.core.profiles import PROFILES, Profile

PROG = "vllm-watchdog check"

HELP = """\
Scrape one /metrics endpoint once and print the engine series the watchdog would see.

TARGET forms:
  http://HOST:PORT/metrics   GET with the watchdog's limits (gzip, no redirects, no credentials,
                             --deadline for the whole scrape, --max-bytes after decompression)
  PATH                       a saved exposition (e.g. from curl -s http://.../metrics > m.prom)
  -                          read the exposition from stdin
  --config FILE [--target NAME ...]
                             read with that watchdog config target's profile (custom ones too) and print its
                             effective policy on stderr: window and where it came from, min samples, action,
                             completion-only window. A pod several targets' podSelectors match: give each
                             --target; the one run judges it by is used (the longest window)
  --prometheus URL --pod NS/NAME
                             the pod's series as the watchdog reads them with source: prometheus (the
                             same queries, restricted to the pod; --deadline bounds them all together,
                             --max-bytes each answer)

Output: one block (text) or object (json) per engine series. A series is one engine inside the server,
identified by the profile's engine labels (vLLM: engine, model_name), with every signal the watchdog reads:
  running    requests running now (gauge; vLLM: vllm:num_requests_running)
  waiting    requests queued (gauge), minus the profile's ignored waiting series (vLLM: deferred ones)
  paused     > 0: the engine says it sleeps or was paused on purpose (never stalled)
  progress   each progress signal and when the engine moves it: counters that must rise and gauges that
             must change (vLLM: token counters, the step histogram's count, the KV-cache usage gauge)
'-' (text) or null (json) means the body has no such sample: unknown, not zero. The watchdog sees a wedge
as running > 0 while no progress signal moves across scrapes: run check twice to compare.
json: {"source": TARGET, "profile": NAME, "metrics_path": PATH, "series": [{"labels": {...}, "running": N,
       "waiting": N, "progress": {"SELECTOR": N, ...}, "paused": N}, ...], "skipped_lines": N,
       "found": [names]}; NaN/Inf values are written as strings.
skipped_lines counts malformed lines of the profile's metrics (skipped; the rest is still used).

Exit status: 0 metrics found; 1 none of the profile's metrics in the body (vLLM started with
--disable-log-stats? wrong --profile?), or the body exceeds the parse bounds (the watchdog would read it as
unknown); 2 bad usage, or the target could not be scraped or read. With --prometheus: 0 series found and
usable; 1 no series of the pod, or the watchdog would read them as unknown (its target's up is 0, no sample
time); 2 bad usage or the queries failed.
"""


def add_parser(verbs: Any) -> None:
    """Register the ``check`` verb on an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "check",
        help="scrape one /metrics endpoint (URL, file or stdin) and show the engine series found",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", nargs="?", help="http(s):// URL, file path, or '-' for stdin")
    p.add_argument(
        "--config", metavar="FILE", default=None,
        help="read with the profile of a target of this watchdog config file (custom profiles too) and print that "
             "target's effective policy (window and where it came from, min samples, action, completion-only "
             "window) on stderr",
    )
    p.add_argument("--target", dest="config_target", metavar="NAME", action="append", default=None,
                   help=TARGET_HELP)
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=None,
        help="which engine's metric names to read (default: vllm)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    p.add_argument(
        "--deadline",
        type=positive_seconds,
        default=BY_NAME["scrape_deadline_seconds"].default,
        metavar="SECONDS",
        help="total time one scrape may take, body included (default: %(default)s)",
    )
    p.add_argument(
        "--max-bytes",
        type=positive_int,
        default=BY_NAME["max_body_bytes"].default,
        metavar="N",
        help="largest body accepted, in bytes after decompression (default: %(default)s)",
    )
    check_prometheus.add_arguments(p)
    p.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Run ``check`` for parsed ``args``; return the exit status (0, 1 or 2, see the module docstring)."""
    try:
        profile = _profile(args)
    except ValueError as exc:
        return refuse(PROG, str(exc))
    if getattr(args, "prometheus", None):
        return check_prometheus.run(args, profile, _as_json, _as_table)
    if args.target is None:
        print(f"{PROG}: TARGET (or --prometheus URL --pod NAMESPACE/NAME) is required", file=sys.stderr)
        raise SystemExit(2)  # a usage error, as argparse exits on one
    target: str = args.target
    try:
        body = _read_target(target, args.deadline, args.max_bytes)
    except ScrapeError as exc:
        return refuse(PROG, f"cannot scrape {redact(target)}: {exc}")
    except OSError as exc:
        return refuse(PROG, f"cannot read {target}: {exc.strerror or exc}")
    result = parse_exposition(body, profile)
    if args.format == "json":
        print(json.dumps(_as_json(result, target, profile), indent=2))
    elif result.series:
        print(_as_table(result, target, profile))
    if result.overrun:
        print(f"{PROG}: parse stopped, the body is unknown to the watchdog: {result.overrun}", file=sys.stderr)
        return 1
    _warn(result, profile)
    if not result.found_families:
        print(
            f"{PROG}: none of the {profile.name} profile's metrics ({', '.join(profile.metric_names())}) "
            f"found in {target} ({len(body)} bytes). Was the engine started with metrics off (vLLM: "
            f"--disable-log-stats; SGLang: without --enable-metrics; llama.cpp: without --metrics), is the "
            f"path wrong ({profile.name} serves them at {profile.metrics_path}), or is --profile wrong?",
            file=sys.stderr,
        )
        return 1
    return 0


def _warn(result: ParseResult, profile: Profile) -> None:
    """The series the watchdog would read as unknown, and the ones dropped beyond the cap, on stderr."""
    no_running = [s.key or "(no labels)" for s in result.series if known(s.running) is None]
    if no_running:
        print(f"{PROG}: warning: no valid running gauge ({profile.running}) in series {', '.join(no_running)}: "
              f"missing, NaN, infinite or negative; the watchdog reads them as unknown", file=sys.stderr)
    blind = [s.key or "(no labels)" for s in result.series
             if known(s.running) is not None and not live_evidence(s, profile.progress)]
    if blind:
        print(f"{PROG}: warning: no live progress signal of the {profile.name} profile in series "
              f"{', '.join(blind)} (none, or only ones that move when a request finishes): the watchdog reads "
              f"them as unknown and never deletes them unless completionOnlyWindowSeconds is set (see "
              f"docs/engines.md)", file=sys.stderr)
    if result.dropped_series:
        print(f"{PROG}: note: {result.dropped_series} engine series beyond the cap were dropped", file=sys.stderr)


def _profile(args: argparse.Namespace) -> Profile:
    """--profile, or the profile of the --config target, whose effective policy is printed on stderr; raises
    ValueError (one line) on a bad --config or --target."""
    chosen = chosen_target(args.config, args.config_target, args.profile is not None)
    if chosen is not None:
        print(chosen.notes(PROG, chosen.config.policy_of(chosen.target)[0].describe()), file=sys.stderr)
    return profile_of(chosen, args.profile)


def _read_target(target: str, deadline_s: float, max_bytes: int) -> bytes:
    """The body of ``target``; raises ScrapeError (URLs) or OSError (files, stdin, too large)."""
    if "://" in target:
        from watchdog.controller.wiring import one_scraper  # the composition root, loaded for a URL only: a file
        # or stdin is read without it (and without the Kubernetes client its other collaborators import)
        limits = ScrapeLimits(
            connect_timeout_s=min(BY_NAME["connect_timeout_seconds"].default, deadline_s),
            deadline_s=deadline_s,
            max_bytes=max_bytes,
        )
        scraper = one_scraper(limits)  # the cycle's transport: its loop starts here and stops with close()
        try:
            return scraper.fetch(target)
        finally:
            scraper.close()
    if target == "-":
        data = sys.stdin.buffer.read(max_bytes + 1)
    else:
        with open(target, "rb") as handle:
            data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(f"larger than --max-bytes {max_bytes}")
    return data


def _as_json(result: ParseResult, target: str, profile: Profile) -> dict[str, object]:
    return {
        "source": target,
        "profile": profile.name,
        "metrics_path": profile.metrics_path,
        "series": [_json_value(s.as_dict(profile)) for s in result.series],
        "skipped_lines": result.skipped_lines,
        "found": sorted(result.found_families),
    }


def _json_value(value: object) -> object:
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return value


def _as_table(result: ParseResult, target: str, profile: Profile) -> str:
    lines = [f"source: {target}   profile: {profile.name}   series: {len(result.series)}   "
             f"skipped lines: {result.skipped_lines}"]
    width = max(len(name) for name in profile.progress_names())
    for s in result.series:
        lines.append(f"series {{{s.key}}}" if s.key else "series (no labels)")
        lines.append(f"  running   {_text_value(s.running)}")
        if profile.waiting is not None:
            lines.append(f"  waiting   {_text_value(s.waiting)}")
        if profile.paused:
            lines.append(f"  paused    {_text_value(s.paused)}")
        for index, (selector, value) in enumerate(zip(profile.progress, s.progress, strict=False)):
            head = "  progress  " if index == 0 else " " * 12
            lines.append(f"{head}{str(selector).ljust(width)}  {_text_value(value).rjust(12)}  "
                         f"{selector.kind}{' (completion-only)' if selector.completion_only else ''}: "
                         f"{selector.note}".rstrip())
    return "\n".join(lines)


def _text_value(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


