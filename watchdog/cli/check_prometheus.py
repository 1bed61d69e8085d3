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

from watchdog.adapters.prometheus import PrometheusClient, PrometheusError, PrometheusLimits
from watchdog.core.profiles import Profile
from watchdog.core.promql import group_pods, slot_queries, up_query

PROG = "vllm-watchdog check"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", metavar="URL", help="read the pod's signals from this Prometheus instead of "
                   "TARGET (with --pod)")
    p.add_argument("--pod", metavar="NAMESPACE/NAME", help="the pod to read from --prometheus")
    p.add_argument("--staleness", type=float, default=60.0, metavar="SECONDS",
                   help="with --prometheus: series older than this are unknown (default: %(default)s)")
    p.add_argument("--bearer-token-file", metavar="FILE", help="with --prometheus: bearer token file")
    p.add_argument("--ca-file", metavar="FILE", help="with --prometheus: CA bundle for its TLS certificate")
    p.add_argument("--namespace-label", default="namespace", help="with --prometheus (default: %(default)s)")
    p.add_argument("--pod-label", default="pod", help="with --prometheus (default: %(default)s)")


def run(args: argparse.Namespace, profile: Profile, as_json: object, as_table: object) -> int:
    """``check`` against Prometheus; ``as_json``/``as_table``: check's own formatters (same output)."""
    namespace, _, name = str(args.pod or "").partition("/")
    if args.target is not None or not namespace or not name or "/" in name:
        print(f"{PROG}: --prometheus URL needs --pod NAMESPACE/NAME and no TARGET", file=sys.stderr)
        return 2
    if not 0 < args.staleness <= 86400:
        print(f"{PROG}: --staleness must be in (0, 86400] seconds", file=sys.stderr)
        return 2
    try:
        client = PrometheusClient(PrometheusLimits(args.prometheus, timeout_s=args.deadline, max_bytes=args.max_bytes,
                                                   bearer_token_file=args.bearer_token_file, ca_file=args.ca_file))
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    restrict = {args.namespace_label: namespace, args.pod_label: name}
    queries = slot_queries(profile, args.staleness, restrict)
    up = up_query(args.staleness, args.pod_label, restrict)
    asked = [up, *(q for q in queries if q is not None)]
    try:
        answers = dict(zip(asked, client.query_many(asked, time.time()), strict=True))
    except PrometheusError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    reading = group_pods(profile, [None if q is None else answers[q] for q in queries], answers[up],
                         args.namespace_label, args.pod_label).get((namespace, name))
    if reading is None or not reading.parsed.series:
        print(f"{PROG}: no series of the {profile.name} profile for pod {namespace}/{name} in {args.prometheus} "
              f"within {args.staleness:g} s (is Prometheus scraping it, with labels {args.namespace_label} and "
              f"{args.pod_label}?): the watchdog reads it as unknown", file=sys.stderr)
        return 1
    source = args.prometheus
    if args.format == "json":
        print(json.dumps(as_json(reading.parsed, source, profile), indent=2))  # type: ignore[operator]
    else:
        when = dt.datetime.fromtimestamp(reading.t, dt.UTC).isoformat(timespec="seconds")
        print(f"pod {namespace}/{name}, newest sample {when}")
        print(as_table(reading.parsed, source, profile))  # type: ignore[operator]
    if reading.down:
        print(f"{PROG}: Prometheus' newest up sample of the pod's target is 0: the watchdog reads it as unknown",
              file=sys.stderr)
        return 1
    return 0
