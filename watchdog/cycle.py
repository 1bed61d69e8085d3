"""One cycle of the watchdog: discover -> scrape (worker pool) -> detect -> decide -> act.

:meth:`Watchdog.run_cycle` is the only cycle function: the scheduler and ``run --once`` both call it. It
never raises for a single pod's trouble (logged, counted as unknown); an API failure during discovery fails
the whole cycle (logged by the caller), because acting on half a picture is unsafe.

State is kept per engine series, keyed by pod UID plus the engine's labels, dropped when the pod is gone and
reset when the pod's container restart count changes. Sample times come from the monotonic clock.

API requests per cycle: 1 namespace LIST + 1 pod LIST per target (all namespaces, label selector,
``resourceVersion=0`` so the API server answers from its watch cache) — independent of the number of pods —
plus a few GETs/DELETE/Events per remediation.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from watchdog.actions import Remediation, Remediator
from watchdog.config import NAMESPACE_LABEL, Config
from watchdog.detector import DetectorState, Sample, Verdict
from watchdog.discovery import ScrapeTarget, discover
from watchdog.kube import KubeClient
from watchdog.metrics import Metrics, new_metrics
from watchdog.parsing import EngineSnapshot, ParseResult, parse_exposition
from watchdog.policy import DeletionPolicy
from watchdog.profiles import Profile, custom_profile, get_profile
from watchdog.scrape import ScrapeError, ScrapeLimits, Scraper

log = logging.getLogger("watchdog.cycle")


@dataclass
class EngineState:
    """The detector and the latest snapshot of one engine series."""

    detector: DetectorState
    last: EngineSnapshot | None = None
    verdict: Verdict | None = None


@dataclass
class PodState:
    """Per pod UID: the restart count the engine states belong to, and one state per engine series."""

    restart_count: int
    engines: dict[str, EngineState] = field(default_factory=dict)


@dataclass
class CycleReport:
    """What one cycle saw and did (for logs, tests and the demo)."""

    pods: int = 0
    engines: Counter[str] = field(default_factory=Counter)
    scrapes: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    remediations: list[tuple[str, Remediation]] = field(default_factory=list)
    verdicts: list[tuple[str, str, Verdict]] = field(default_factory=list)  # (pod ref, series key, verdict)
    api_requests: int = 0
    duration_s: float = 0.0


class Watchdog:
    """Holds the state between cycles. ``clock``: seconds, monotonic (injectable for tests)."""

    def __init__(self, config: Config, kube: KubeClient, *, metrics: Metrics | None = None,
                 scraper: Scraper | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.kube, self.clock = config, kube, clock
        self.metrics = metrics or new_metrics()
        self.scraper = scraper or Scraper(ScrapeLimits(
            connect_timeout_s=config.connect_timeout_seconds, deadline_s=config.scrape_deadline_seconds,
            max_bytes=config.max_body_bytes))
        self.policy = DeletionPolicy(global_dry_run=config.dry_run)
        self.remediator = Remediator(kube, self.policy, self._rescrape, self.metrics, config.grace_period_seconds,
                                     count_waiting=config.count_waiting)
        self.pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="scrape")
        self.pods: dict[str, PodState] = {}
        self.ever_ready: set[str] = set()
        self.last_success: float | None = None  # monotonic time the last cycle completed
        self._profiles: dict[str, Profile] = {
            t.name: custom_profile(t.name, t.metrics, base=t.profile) if t.metrics else get_profile(t.profile)
            for t in config.targets
        }

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.scraper.close()

    # -- the cycle ----------------------------------------------------------------------------------------
    def run_cycle(self) -> CycleReport:
        """Discover, scrape, detect and act once. Raises only when discovery itself fails (KubeError)."""
        started, requests_before = time.perf_counter(), self.kube.api_requests
        report = CycleReport()
        namespaces = self.kube.list_namespaces(NAMESPACE_LABEL)
        pods_by_target = [(t, self.kube.list_pods(t.pod_selector)) for t in self.config.targets]
        found = discover(namespaces, pods_by_target, ever_ready=self.ever_ready,
                         require_controller=self.config.require_controller)
        live = {str((p.get("metadata") or {}).get("uid")) for _, pods in pods_by_target for p in pods}
        self.ever_ready = (self.ever_ready | found.ready_uids) & live
        self._forget_gone({t.uid for t in found.targets})
        report.pods, report.skipped = len(found.targets), found.skipped

        results = list(self.pool.map(self._scrape, found.targets))
        for target, (outcome, parsed) in zip(found.targets, results, strict=True):
            report.scrapes[outcome] += 1
            self.metrics.scrapes.labels(outcome).inc()
            try:
                self._judge(target, parsed, report)
            except Exception:  # one pod's trouble never stops the cycle
                log.exception("judging pod %s failed", target.ref)

        report.api_requests = self.kube.api_requests - requests_before
        report.duration_s = time.perf_counter() - started
        self._publish(report)
        self.last_success = self.clock()
        return report

    def _scrape(self, target: ScrapeTarget) -> tuple[str, ParseResult | None]:
        try:
            body = self.scraper.fetch(target.url)
        except ScrapeError as exc:
            log.debug("scrape %s of %s failed: %s", target.url, target.ref, exc)
            return exc.reason, None
        return "ok", parse_exposition(body, self._profiles[target.target])

    def _rescrape(self, target: ScrapeTarget, key: str) -> EngineSnapshot | None:
        outcome, parsed = self._scrape(target)
        self.metrics.scrapes.labels(outcome).inc()
        if parsed is None:
            return None
        return next((s for s in parsed.series if s.key == key), None)

    def _forget_gone(self, live: set[str]) -> None:
        for uid in set(self.pods) - live:
            del self.pods[uid]
        self.policy.forget_pods(live)

    def _judge(self, target: ScrapeTarget, parsed: ParseResult | None, report: CycleReport) -> None:
        pod = self.pods.get(target.uid)
        if pod is None or pod.restart_count != target.restart_count:
            if pod is not None:
                log.info("pod %s restarted (restart count %d -> %d): detector state reset", target.ref,
                         pod.restart_count, target.restart_count)
            pod = self.pods[target.uid] = PodState(target.restart_count)
        t = self.clock()
        seen: dict[str, EngineSnapshot] = {s.key: s for s in parsed.series} if parsed else {}
        for key in set(seen) | set(pod.engines):
            snap = seen.get(key)
            engine = pod.engines.get(key)
            if engine is None:
                engine = pod.engines[key] = EngineState(DetectorState(
                    self.config.window_seconds, min_samples=self.config.min_samples,
                    count_waiting=self.config.count_waiting))
            sample = (Sample(t, snap.running, snap.generation_tokens, snap.prompt_tokens, snap.waiting,
                             snap.heartbeat) if snap else Sample(t, None, None, None))
            verdict = engine.detector.observe(sample)
            previous = engine.verdict.state if engine.verdict else None
            engine.verdict = verdict
            if snap is not None:
                engine.last = snap
            report.engines[verdict.state] += 1
            report.verdicts.append((target.ref, key, verdict))
            if verdict.state != previous:
                log.info("pod %s series {%s}: %s -> %s: %s", target.ref, key, previous, verdict.state,
                         verdict.reason)
            if not verdict.stalled:
                self.policy.episode_over(target.uid, key)
        self._act(target, pod, report)

    def _act(self, target: ScrapeTarget, pod: PodState, report: CycleReport) -> None:
        for _key, engine in sorted(pod.engines.items()):
            if engine.verdict is None or not engine.verdict.stalled or engine.last is None:
                continue
            result = self.remediator.remediate(target, engine.last, engine.verdict, self.config.window_seconds)
            if result.result == "skip":
                continue  # this stall episode was already acted on
            self.metrics.stalls.inc()
            report.remediations.append((target.ref, result))
            if result.result == "deleted":
                self.pods.pop(target.uid, None)
                return  # one deletion per pod

    def _publish(self, report: CycleReport) -> None:
        m = self.metrics
        m.pods_watched.set(report.pods)
        for state in ("idle", "progressing", "suspect", "stalled", "unknown"):
            m.engines.labels(state).set(report.engines.get(state, 0))
        m.cycle_duration.observe(report.duration_s)
        m.last_cycle.set(time.time())
        log.info(
            "cycle done: %d pods, engines %s, scrapes %s, skipped %s, %d remediations, %d API requests, %.3f s",
            report.pods, dict(report.engines), dict(report.scrapes), dict(report.skipped),
            len(report.remediations), report.api_requests, report.duration_s,
            extra={"pods": report.pods, "duration_s": round(report.duration_s, 4)},
        )
