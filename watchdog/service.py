"""``run``: the watchdog as a long-running process (or one cycle with ``--once``).

Wires the pieces: configuration -> logging -> Kubernetes client -> :class:`~watchdog.cycle.Watchdog`, an
``apscheduler`` 3.x interval job (``max_instances=1``, ``coalesce=True``, jitter) that calls
:meth:`~watchdog.cycle.Watchdog.run_cycle`, and an HTTP server on ``listenAddress`` with ``/metrics``,
``/healthz`` (503 once no cycle completed for 3 intervals) and ``/readyz`` (200 once a cycle completed).
SIGTERM/SIGINT stop it cleanly.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from watchdog.config import Config, ConfigError, add_flags, flags_from_args, load_config
from watchdog.cycle import Watchdog
from watchdog.escalation import NodeEscalator, NodeStallHistory
from watchdog.kube import KubeClient, KubeError, KubeSettings
from watchdog.leader import LeaderElector
from watchdog.logs import setup_logging

log = logging.getLogger("watchdog.service")

HELP = """\
Run the watchdog: every scrape interval, list the pods of opted-in namespaces that match the targets' label
selectors, GET each pod's /metrics, run the stall detector per engine series, and delete a pod whose engine
stayed busy without progress for the window (UID precondition), with Warning Events on the pod and its
top controller owner.

Opt a namespace in:  kubectl label namespace NS vllm-watchdog.io/enabled=dry-run   (observe only)
                     kubectl label namespace NS vllm-watchdog.io/enabled=true --overwrite   (enforce)
Opt a pod out:       annotation vllm-watchdog.io/exclude: "true"

Safety rails (RUNBOOK.md): budgets (--max-deletions per --deletion-window-seconds, per namespace, one per owner
until its replacement is Ready), a mass-stall breaker (--breaker-fraction), warm-up and minimum pod age (one
window), --paused, --leader-election, --action evict, --node-escalation. Deferred stalls get
StalledPodDeletionDeferred Events.

Kubernetes access: --kubeconfig FILE (and --context), else the in-cluster ServiceAccount, else ~/.kube/config.
Every setting below can also come from a WATCHDOG_* environment variable or the --config YAML file
(camelCase keys; 'targets' only from the file or WATCHDOG_TARGETS). Precedence: flag > env > file > default.

Exit status: 0 clean stop (or --once cycle done); 1 the --once cycle failed (e.g. the API server did not
answer); 2 bad configuration, an unusable kubeconfig, or listenAddress cannot be bound.
"""


def add_parser(verbs: Any) -> None:
    """Register the ``run`` verb."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "run", help="the watchdog: discover, scrape, detect, delete wedged pods + Events",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML config file (env WATCHDOG_CONFIG)")
    p.add_argument("--once", action="store_true", help="run one cycle and exit (no scheduler, no HTTP server)")
    add_flags(p)
    p.set_defaults(handler=run_service)


class _Handler(BaseHTTPRequestHandler):
    watchdog: Watchdog
    interval_s: float
    started: float

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.watchdog.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            last = self.watchdog.last_success
            age = self.watchdog.clock() - (last if last is not None else self.started)
            ok = age <= 3 * self.interval_s
            self._send(200 if ok else 503, json.dumps({"ok": ok, "seconds_since_cycle": round(age, 1)}).encode())
        elif path == "/readyz":
            ready = self.watchdog.last_success is not None
            self._send(200 if ready else 503, json.dumps({"ready": ready}).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def start_http(address: str, watchdog: Watchdog, interval_s: float) -> ThreadingHTTPServer:
    """Serve /metrics, /healthz, /readyz on ``address`` (host:port) from a daemon thread."""
    host, _, port = address.rpartition(":")
    handler = type("Handler", (_Handler,), {"watchdog": watchdog, "interval_s": interval_s,
                                            "started": watchdog.clock()})
    server = ThreadingHTTPServer((host.strip("[]"), int(port)), handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


def safe_cycle(watchdog: Watchdog) -> None:
    """The scheduler's job: one cycle; any exception is logged and counted, and the loop goes on."""
    try:
        watchdog.run_cycle()
    except Exception as exc:
        watchdog.metrics.cycle_failures.inc()
        log.error("cycle failed, will retry next interval: %s", exc, exc_info=not isinstance(exc, KubeError))


def run_service(args: argparse.Namespace) -> int:
    """The ``run`` verb."""
    try:
        config = load_config(args.config, flags=flags_from_args(args))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"vllm-watchdog run: config: {problem}", file=sys.stderr)
        return 2
    setup_logging(config.log_format, config.log_level)
    log.info("starting vllm-stall-watchdog with effective configuration", extra={"config": config.summary()})
    if config.log_format == "text":
        log.info("effective configuration: %s", json.dumps(config.summary()))
    for warning in config.warnings:
        log.warning("config: %s", warning)
    if config.dry_run:
        log.warning("*** DRY-RUN: nothing will be deleted; stalls are reported as StalledPodDryRun Events ***")
    try:
        kube = KubeClient.from_settings(KubeSettings(kubeconfig=config.kubeconfig, context=config.context,
                                                     request_timeout_s=config.api_timeout_seconds))
    except KubeError as exc:
        print(f"vllm-watchdog run: cannot reach the Kubernetes API: {exc}", file=sys.stderr)
        return 2
    elector = _elector(config, kube)
    escalation = None
    if config.node_escalation:
        escalation = NodeEscalator(kube, NodeStallHistory(config.node_escalation_threshold,
                                                          config.node_escalation_window_seconds),
                                   taint=config.node_taint, dry_run=config.dry_run)
    watchdog = Watchdog(config, kube, leader=elector.is_leader if elector else lambda: True, escalation=escalation)
    if args.once:
        try:
            if elector is not None:
                elector.step()
            watchdog.run_cycle()
        except Exception as exc:
            log.error("cycle failed: %s", exc)
            return 1
        finally:
            if elector is not None:
                elector.stop()
            watchdog.close()
        return 0
    return _serve(config.listen_address, config.scrape_interval_seconds, config.jitter_seconds, watchdog, elector)


def _elector(config: Config, kube: KubeClient) -> LeaderElector | None:
    """The Lease campaign when leader election is on (Lease in leaderElectionNamespace, $POD_NAMESPACE or
    default), with client-go's timings: 15 s lease, 10 s renew deadline, 2 s retry."""
    if not config.leader_election:
        return None
    namespace = config.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default"
    elector = LeaderElector(kube, namespace, name=config.lease_name)
    log.info("leader election on: Lease %s/%s as %s", namespace, config.lease_name, elector.identity)
    return elector


def _serve(address: str, interval_s: float, jitter_s: float, watchdog: Watchdog,
           elector: LeaderElector | None) -> int:
    try:
        server = start_http(address, watchdog, interval_s)
    except OSError as exc:
        print(f"vllm-watchdog run: cannot listen on {address} (listenAddress): {exc.strerror or exc}",
              file=sys.stderr)
        watchdog.close()
        return 2
    if elector is not None:
        elector.start()
    log.info("serving /metrics /healthz /readyz on %s:%d", *server.server_address[:2])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    scheduler = BackgroundScheduler()
    scheduler.add_job(safe_cycle, "interval", args=[watchdog], seconds=interval_s, max_instances=1,
                      coalesce=True, jitter=jitter_s or None, next_run_time=dt.datetime.now(dt.UTC),
                      id="cycle", name="watchdog cycle")
    scheduler.start()
    try:
        stop.wait()
    finally:
        log.info("stopping")
        scheduler.shutdown(wait=False)
        if elector is not None:
            elector.stop()  # releases the Lease so a standby takes over at once
        server.shutdown()
        watchdog.close()
    return 0
