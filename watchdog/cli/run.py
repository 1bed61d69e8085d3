"""``run``: argument parsing, configuration errors and exit codes for the watchdog service
(:mod:`watchdog.controller.service` runs it)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from watchdog.adapters.logs import setup_logging
from watchdog.config.flags import add_flags, flags_from_args
from watchdog.config.loader import ConfigError, load_config
from watchdog.config.settings import BY_NAME

log = logging.getLogger("watchdog.cli.run")

HELP = """\
Run the watchdog: every scrape interval, list the pods of opted-in namespaces that match the targets' label
selectors, GET each pod's /metrics, run the stall detector per engine series, and delete a pod whose engine
stayed busy without progress for the window (UID precondition), with Warning Events on the pod and its
top controller owner.

Opt a namespace in:  kubectl label namespace NS vllm-watchdog.io/enabled=dry-run   (observe only)
                     kubectl label namespace NS vllm-watchdog.io/enabled=true --overwrite   (enforce)
Opt a pod out:       annotation vllm-watchdog.io/exclude: "true"
A pod several targets match is judged by the one with the longest window (equal: the first listed), not at all
when their engine profiles differ (targets_conflict); one StallTargetsOverlap Event says which. Targets with
the same podSelector are refused.

Safety rails (docs/safety.md): budgets (--max-deletions per --deletion-window-seconds, per namespace, one per owner
until its replacement is Ready), a mass-stall breaker (--breaker-fraction), warm-up and minimum pod age (one
window), --paused, --leader-election, --action evict, --node-escalation. Deferred stalls get
StalledPodDeletionDeferred Events.

Kubernetes access: --kubeconfig FILE (and --context), else the in-cluster ServiceAccount, else ~/.kube/config.
Every setting below can also come from a WATCHDOG_* environment variable or the --config YAML file
(camelCase keys; 'targets' only from the file or WATCHDOG_TARGETS). Precedence: flag > env > file > default.

Exit status: 0 clean stop (or --once cycle done); 1 the --once cycle failed (e.g. the API server did not
answer); 2 a refused command line or configuration, an unusable kubeconfig, or listenAddress cannot be bound.
Each of these is one line on stderr in the configured --log-format (json: one object with "level": "error" and
a "reason" field), never a traceback.
"""


def add_parser(verbs: Any) -> None:
    """Register the ``run`` verb."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "run", help="the watchdog: discover, scrape, detect, delete wedged pods + Events",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML config file (env WATCHDOG_CONFIG)")
    p.add_argument("--once", action="store_true", help="run one cycle and exit (no scheduler, no HTTP server)")
    add_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``run`` verb: 2 on a configuration problem (all of them in one log line, in the configured log format
    as far as it could be read), else what the service returns."""
    try:
        settings = load_config(args.config, flags=flags_from_args(args))
    except ConfigError as exc:
        setup_logging(exc.log_format, BY_NAME["log_level"].default)
        count = len(exc.problems)
        log.error("configuration refused, %d problem%s: %s", count, "" if count == 1 else "s",
                  "; ".join(exc.problems), extra={"reason": "config", "problems": exc.problems})
        return 2
    from watchdog.adapters.kubeimport import lean_client

    lean_client()  # the Kubernetes client without its ~900 model classes (~34 MiB); adapters/kubeimport.py
    from watchdog.controller.service import run_service  # heavy (kubernetes, apscheduler): only when it runs

    return run_service(settings, once=args.once)
