"""``check --prometheus URL --pod NAMESPACE/NAME``: the engine series the watchdog would read for one pod from
Prometheus (``source: prometheus``), with the same queries as ``run``'s confirmation (restricted to the pod)
and the same JSON shape as ``check`` on a URL. Exit 0 series found, 1 none (or the watchdog would read them as
unknown: its target's up is 0), 2 bad usage or the queries failed."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable

from watchdog.adapters.prometheus import PrometheusLimits
from watchdog.cli.argtypes import refuse
from watchdog.config.settings import BY_NAME
from watchdog.core.parsing import ParseResult
from watchdog.core.profiles import Profile
from watchdog.core.promql import pod_labels_problem, reading_outcome

PROG = "vllm-watchdog check"
STALENESS = BY_NAME["prometheus_staleness_seconds"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", metavar="URL", help="read the pod's signals from this Prometheus instead of "
                   "TARGET (with --pod)")
    p.add_argument("--pod", metavar="NAMESPACE/NAME", help="the pod to read from --prometheus")
    p.add_argument("--staleness", type=float, default=60.0, metavar="SECONDS",
                   help="with --prometheus: series older than this are unknown (default: %(default)s)")
    p.add_argument("--bearer-token-file", metavar="FILE", help="with --prometheus: bearer token file")
    p.add_argument("--username-file", metavar="FILE", help="with --prometheus: basic auth username file (with "
                   "--password-file)")
    p.add_argument("--password-file", metavar="FILE", help="with --prometheus: basic auth password file")
    p.add_argument("--tenant", help="with --prometheus: X-Scope-OrgID tenant (Mimir, Cortex)")
    p.add_argument("--ca-file", metavar="FILE", help="with --prometheus: CA bundle for its TLS certificate")
    p.add_argument("--namespace-label", default="namespace", help="with --prometheus (default: %(default)s)")
    p.add_argument("--pod-label", default="pod", help="with --prometheus (default: %(default)s)")


def run(args: argparse.Namespace, profile: Profile, as_json: Callable[[ParseResult, str, Profile], dict[str, object]],
        as_table: Callable[[ParseResult, str, Profile], str]) -> int:
    """``check`` against Prometheus; ``as_json``/``as_table``: check's own formatters (same output)."""
    namespace, _, name = str(args.pod or "").partition("/")
    if args.target is not None or not namespace or not name or "/" in name:
        return refuse(PROG, "--prometheus URL needs --pod NAMESPACE/NAME and no TARGET")
    low, high = STALENESS.minimum, STALENESS.maximum
    if not low <= args.staleness <= high:
        return refuse(PROG, f"--staleness must be in [{low:g}, {high:g}] seconds (Prometheus' lookback delta)")
    if problem := pod_labels_problem(args.namespace_label, args.pod_label):
        return refuse(PROG, f"--namespace-label/--pod-label: {problem}")
    from watchdog.controller.wiring import one_pod_source  # the composition root (see check._read_target)

    try:
        source = one_pod_source(PrometheusLimits(
            args.prometheus, timeout_s=args.deadline, max_bytes=args.max_bytes,
            bearer_token_file=args.bearer_token_file, ca_file=args.ca_file, username_file=args.username_file,
            password_file=args.password_file, tenant=args.tenant),
            args.staleness, args.namespace_label, args.pod_label)
    except ValueError as exc:
        return refuse(PROG, str(exc))
    reading = source.read_pod(profile, namespace, name, time.time())
    if isinstance(reading, str):
        return refuse(PROG, reading)
    if reading is None:
        print(f"{PROG}: no series of the {profile.name} profile for pod {namespace}/{name} in {args.prometheus} "
              f"within {args.staleness:g} s (is Prometheus scraping it, with labels {args.namespace_label} and "
              f"{args.pod_label}?): the watchdog reads it as unknown", file=sys.stderr)
        return 1
    outcome, why = reading_outcome(reading)
    unknown = f"{PROG}: pod {namespace}/{name}: {why}: the watchdog reads it as unknown"
    if not reading.parsed.series:  # only a pod whose target is down reads so: no table to show
        print(unknown, file=sys.stderr)
        return 1
    url = args.prometheus
    if args.format == "json":
        print(json.dumps(as_json(reading.parsed, url, profile), indent=2))
    else:
        when = "unknown" if reading.t is None else dt.datetime.fromtimestamp(reading.t, dt.UTC).isoformat(
            timespec="seconds")
        print(f"pod {namespace}/{name}, newest sample {when}")
        print(as_table(reading.parsed, url, profile))
    if outcome != "ok":
        print(unknown, file=sys.stderr)
        return 1
    return 0
