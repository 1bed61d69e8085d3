"""The watchdog service: a long-running process (or one cycle with ``--once``).

Wires the pieces: configuration -> logging -> Kubernetes client -> :class:`~watchdog.controller.cycle.Watchdog`, an
``apscheduler`` 3.x interval job (``max_instances=1``, ``coalesce=True``, jitter) that calls
:meth:`~watchdog.controller.cycle.Watchdog.run_cycle`, and an HTTP server on ``listenAddress`` with ``/metrics``,
``/healthz`` (503 once no cycle STARTED for 3 intervals: liveness never waits on the API server), ``/readyz``
(200 while a cycle COMPLETED within 3 intervals and the API server does not refuse the watchdog's credentials:
the Kubernetes client's :class:`~watchdog.adapters.kubeauth.Credentials`, also counted in the metrics) and
``/status`` (what the watchdog thinks, as JSON).

SIGTERM/SIGINT stop it cleanly, logged at info: no new cycle starts, the HTTP server closes every connection,
a cycle in progress gets up to :data:`STOP_WAIT_S` to finish (a deletion and its Events in flight), then the
Lease is released — only if that cycle ended: a cycle still running may have a write in flight, so then the Lease
is left to expire — and the scrapes still pending are cancelled; a cycle still stuck after that is left behind
(the process exits 0 without joining its thread), well inside the chart's 30 s grace period.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.adapters.leader import LeaderElector
from watchdog.adapters.logs import setup_logging
from watchdog.config.settings import Settings
from watchdog.controller.cycle import Watchdog
from watchdog.controller.http import start_http
from watchdog.controller.wiring import wire

log = logging.getLogger("watchdog.controller.service")


STOP_WAIT_S = 10.0  # how long a stop waits for a cycle in progress (an API call or two) before leaving it


class CycleRunner:
    """The scheduler's job around :meth:`~watchdog.controller.cycle.Watchdog.run_cycle`: knows whether a cycle is
    in progress, and that the service is stopping (a cycle cut short by the stop is not a failure)."""

    def __init__(self, watchdog: Watchdog) -> None:
        self.watchdog = watchdog
        self.stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()

    def __call__(self) -> None:
        if self.stopping.is_set():
            return
        self._idle.clear()
        start = self.watchdog.clock()
        try:
            safe_cycle(self.watchdog, self.stopping)
        finally:
            self._idle.set()
        took, interval = self.watchdog.clock() - start, self.watchdog.config.scrape_interval_seconds
        if took > interval and not self.stopping.is_set():  # the next start is skipped: say why, and what helps
            log.warning("cycle took %.1f s, longer than the %g s interval: the next one starts late; pods that time "
                        "out lengthen cycles (see vllm_watchdog_scrapes_total), raise workers (now %d%s) or "
                        "scrapeIntervalSeconds", took, interval, self.watchdog.fanout.size,
                        "" if self.watchdog.config.workers else ", sized by the fleet",
                        extra={"reason": "cycle_overrun"})

    def stop(self, timeout_s: float) -> bool:
        """No new cycle from now on; wait up to ``timeout_s`` for the one in progress. True if none is left."""
        self.stopping.set()
        return self._idle.wait(timeout_s)


def safe_cycle(watchdog: Watchdog, stopping: threading.Event | None = None) -> None:
    """One cycle; any exception is logged and counted, and the loop goes on. Once ``stopping`` is set, an
    exception is the stop cutting the cycle short (its scrapes are cancelled): logged at info, not counted.
    A failure is remembered for ``/readyz`` and ``/status`` (``Watchdog.last_failure``)."""
    try:
        watchdog.run_cycle()
    except Exception as exc:
        if stopping is not None and stopping.is_set():
            log.info("cycle cut short by the shutdown: %s", type(exc).__name__)
            return
        watchdog.metrics.cycle_failures.inc()
        watchdog.last_failure = (watchdog.clock(), " ".join(str(exc).split())[:300] or type(exc).__name__)
        log.error("cycle failed, will retry next interval: %s", exc, exc_info=not isinstance(exc, KubeError),
                  extra={"reason": "api" if isinstance(exc, KubeError) else "cycle"})


def run_service(config: Settings, *, once: bool = False) -> int:
    """Run the watchdog with ``config``: one cycle (``once``: 0 done, 1 it failed) or until SIGTERM/SIGINT
    (0). 2 when the kubeconfig is unusable or the listen address cannot be bound."""
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
        log.error("cannot set up the Kubernetes client (kubeconfig or in-cluster account): %s", exc,
                  extra={"reason": "kubeconfig"})
        return 2
    watchdog, elector = wire(config, kube, os.environ.get("POD_NAMESPACE"), cache=not once)
    kube.credentials.listen(watchdog.metrics.on_credentials)  # 401/403 answers counted, refused or not
    if once:
        try:
            if elector is not None:
                elector.step()
            watchdog.run_cycle()
        except Exception as exc:
            log.error("cycle failed: %s", exc, extra={"reason": "api" if isinstance(exc, KubeError) else "cycle"})
            return 1
        finally:
            if elector is not None:
                elector.stop()
            watchdog.close()
        return 0
    return _serve(config.listen_address, config.scrape_interval_seconds, config.jitter_seconds, watchdog, elector,
                  kube.credentials.refusal)


def _serve(address: str, interval_s: float, jitter_s: float, watchdog: Watchdog,
           elector: LeaderElector | None, refusal: Callable[[], str | None] | None = None) -> int:
    try:
        server = start_http(address, watchdog, interval_s, refusal=refusal)
    except OSError as exc:
        # os.strerror: socket.create_server appends the address as a Python tuple to the exception's text
        log.error("cannot listen on %s (listenAddress): %s", address, os.strerror(exc.errno) if exc.errno else exc,
                  extra={"reason": "listen"})
        watchdog.close()
        return 2
    if elector is not None:
        elector.start()
    log.info("serving /metrics /healthz /readyz /status on %s", server.display_address)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    runner = CycleRunner(watchdog)
    scheduler = BackgroundScheduler()
    scheduler.add_job(runner, "interval", seconds=interval_s, max_instances=1,
                      coalesce=True, jitter=jitter_s or None, next_run_time=dt.datetime.now(dt.UTC),
                      id="cycle", name="watchdog cycle")
    scheduler.start()
    try:
        stop.wait()
    finally:
        log.info("stopping (%s)", received[0] if received else "interrupted")
        scheduler.shutdown(wait=False)
        server.shutdown()
        idle = runner.stop(STOP_WAIT_S)
        if elector is not None:  # released (a standby takes over at once) only when no write can be in flight
            elector.stop(release=idle)
        watchdog.close()
        server.server_close()
    if not idle:
        # Its thread is joined at interpreter exit (the scheduler's and the scrape loop's are not daemons): leave
        # without it. Everything that needs closing is closed; logs are flushed first.
        log.info("a cycle was still running %.0f s after the stop: exiting without waiting for it", STOP_WAIT_S)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
