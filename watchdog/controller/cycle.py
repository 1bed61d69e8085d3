"""One cycle of the watchdog: discover -> scrape (the scraper's event loop) -> detect -> decide -> act.

:meth:`Watchdog.run_cycle` is the only cycle function: the scheduler and ``run --once`` both call it. It
never raises for a single pod's trouble (logged, counted as unknown); an API failure during discovery fails
the whole cycle (logged by the caller), because acting on half a picture is unsafe.

State is kept per engine series, keyed by pod UID plus the engine's labels, dropped when the pod is gone and
reset when the pod's container restart count changes. Sample times come from the monotonic clock: a scraped
sample is stamped when its own body arrived (``Scrapes``), never before it (a stamp before the read that showed
progress would start the stall clock early: a deletion on less proven time than the window) and not when the
cycle judged (a cycle waiting for a hung pod's full deadline, the next one not, moved every stamp by seconds and
a window of whole intervals by one interval, at random); the prompt pods are scraped in the same order every cycle
(``fanout.order``), so a pod's body arrives at about the same moment of each. The confirmation scrape before a
deletion reads the pod again after every stamp of its cycle. Source prometheus: Prometheus' own sample times
moved onto it (``promsource``; a sample already fed is not fed again).

API requests: namespaces and pods from ``listing`` (``run``: the watch-based cache) cost none, else 1 + 1 LIST per
target; plus the brake's ConfigMap GET, a few GETs/DELETE/Events per remediation, and Prometheus' queries.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields

from watchdog.adapters.actuator import Actuator
from watchdog.adapters.ascrape import AsyncScraper
from watchdog.adapters.events import EventRecorder
from watchdog.adapters.logs import counts, facts
from watchdog.adapters.metrics import Metrics, new_metrics
from watchdog.adapters.scrape import ScrapeLimits
from watchdog.config.settings import Settings
from watchdog.controller.brake import Brake
from watchdog.controller.budget import restore_budget
from watchdog.controller.evidence import EvidenceKeeper
from watchdog.controller.fanout import Fanout
from watchdog.controller.health import PodHealth
from watchdog.controller.ledger import DeletionLedger
from watchdog.controller.ports import Clock, Escalation, Fetcher, KubeApi, Listing, Querier
from watchdog.controller.promsource import PrometheusSource, Read, client_from, confirm_read, fleet_reads
from watchdog.controller.quarantine import Quarantine
from watchdog.controller.remediator import Remediation, Remediator
from watchdog.controller.scrapes import Scrapes
from watchdog.controller.state import EngineState, PodRecord
from watchdog.controller.status import Snapshot, snapshot
from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.discovery import discover, invalid_opt_ins
from watchdog.core.lines import Labels
from watchdog.core.model import NAMESPACE_LABEL, WatchedPod
from watchdog.core.parsing import EngineSnapshot, ParseResult
from watchdog.core.policy import DeletionPolicy, Rails
from watchdog.core.profiles import Profile, target_profile
from watchdog.core.vocab import ENGINE_STATES, SETTLED_STATES

log = logging.getLogger("watchdog.controller.cycle")


@dataclass
class CycleReport:
    """What one cycle saw and did (for logs, tests and the demo)."""

    pods: int = 0
    engines: Counter[str] = field(default_factory=Counter)
    scrapes: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    namespaces: Counter[str] = field(default_factory=Counter)  # opted-in namespaces by mode
    remediations: list[tuple[str, Remediation]] = field(default_factory=list)
    verdicts: list[tuple[str, str, Verdict]] = field(default_factory=list)  # (pod ref, series key, verdict)
    api_requests: int = 0
    duration_s: float = 0.0


def rails_from(config: Settings) -> Rails:
    """The policy's limits from the settings: every Rails field is named as its setting."""
    return Rails(**{f.name: getattr(config, f.name) for f in fields(Rails)})


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside.

    A cycle allocates hundreds of thousands of short-lived containers (LISTed pods, Prometheus answers: one dict
    per row, parsed bodies) that reference counting frees; automatic collections while they live scanned them
    again and again (a fifth of a 10,000-series Prometheus cycle's CPU, 10% of a 2,000-pod LIST cycle). At the
    end one collection of the youngest generation -- where everything the cycle allocated still is, no
    collection having run -- frees the cyclic garbage the cycle made (exceptions with tracebacks, connections),
    so memory stays bounded by one cycle's work; it costs what the cycle's survivors cost to traverse once.
    Process-wide: the scrape threads and informers run paused while a cycle is running. A caller that paused
    collections itself keeps them paused, and nothing is collected for it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect(0)


class Watchdog:
    """Holds the state between cycles. ``clock``: seconds, monotonic (injectable for tests)."""

    def __init__(self, config: Settings, kube: KubeApi, *, metrics: Metrics | None = None,
                 scraper: Fetcher | None = None, clock: Clock = time.monotonic,
                 wall_clock: Clock = time.time, leader: Callable[[], bool] = lambda: True,
                 actuator: Actuator | None = None,
                 escalation: Escalation | None = None, own_namespace: str = "default",
                 brake: Brake | None = None, prometheus: Querier | None = None, listing: Listing | None = None) -> None:
        self.config, self.kube, self.clock, self.wall_clock, self.leader = config, kube, clock, wall_clock, leader
        self.listing = listing  # the watch-based cache (closed with the watchdog), when set
        self.lister: Listing | KubeApi = listing or kube  # where namespaces and pods come from each cycle
        self.metrics = metrics or new_metrics()
        self.scraper = scraper or AsyncScraper(ScrapeLimits(
            connect_timeout_s=config.connect_timeout_seconds, deadline_s=config.scrape_deadline_seconds,
            max_bytes=config.max_body_bytes), encoding=config.scrape_encoding)
        self.policy = DeletionPolicy(rails_from(config), started=clock(), budget_known=False)
        # Every write goes through it (the leadership fence); without one, an unfenced one (no leader election).
        self.actuator = actuator or Actuator(kube, write_timeout_s=config.api_timeout_seconds)
        # The deletion ledger (budgetLedger): ConfigMap <leaseName>-ledger in the watchdog's own namespace.
        ledger = DeletionLedger(kube, self.actuator, own_namespace, f"{config.lease_name}-ledger",
                                config.deletion_window_seconds, wall_clock) if config.budget_ledger else None
        self.remediator = Remediator(
            kube, self.policy, self._rescrape, self.metrics, actuator=self.actuator,
            grace_period_s=config.grace_period_seconds,
            count_waiting=config.count_waiting, action=config.action,
            completion_only_allowed=config.completion_only_window_seconds > 0, leader=leader, clock=clock,
            wall_clock=wall_clock, escalation=escalation,
            require_controller=config.require_controller, ledger=ledger,
            events=EventRecorder(kube, self.actuator, self.metrics, clock=clock), evidence=EvidenceKeeper(
                self.actuator, log_lines=config.evidence_log_lines, log_bytes=config.evidence_log_bytes, clock=clock,
                wall_clock=wall_clock))
        self.ledger = ledger
        self.quarantine = Quarantine.from_settings(config, self.actuator, self.metrics, self.remediator.events,
                                                   clock=clock, wall_clock=wall_clock)
        self.namespace_selector = ",".join(filter(None, [NAMESPACE_LABEL, config.namespace_selector]))
        self.fanout = Fanout(config.workers, config.scrape_deadline_seconds)  # workers 0: sized by the fleet
        self.pods: dict[str, PodRecord] = {}  # pod UID -> everything remembered about it
        self.ever_ready: set[str] = set()  # pod UIDs seen Ready (discovery judges pods once Ready)
        self._was_leader = False
        self._warned: set[tuple[str, str]] = set()  # (namespace, label value) already warned about
        self.last_started: float | None = None  # monotonic time the last cycle started (liveness)
        self.last_ended: float | None = None  # monotonic time the last cycle ended, completed or failed
        self.last_success: float | None = None  # monotonic time the last cycle completed (readiness)
        self.last_failure: tuple[float, str] | None = None  # (monotonic time, one line) of the last failed cycle
        self.status: Snapshot | None = None  # what the last completed cycle saw (GET /status)
        self.brake = brake  # the run-time brake (pauseConfigMap), read every cycle
        self.metrics.leader.set(int(leader()))  # from the start: without election always 1, even before a cycle
        if brake is not None:
            self.policy.set_brake(brake.why)
        self.metrics.paused.set(int(self.policy.paused_by is not None))
        self._profiles: dict[str, Profile] = {
            t.name: target_profile(t.name, t.profile, t.metrics) for t in config.targets
        }
        self._sources = {t.name: config.source_of(t) for t in config.targets}
        self.scrapes = Scrapes(self.scraper, self._profiles, self.metrics, clock)
        self.prometheus = None if "prometheus" not in self._sources.values() else PrometheusSource.from_settings(
            config, prometheus or client_from(config))
        self._offset = wall_clock() - clock()  # Prometheus sample times (Unix s) -> the monotonic clock

    def close(self) -> None:
        self.fanout.close()
        for closing in (self.scraper, self.listing):
            if closing is not None:
                closing.close()

    # -- the cycle ----------------------------------------------------------------------------------------
    def run_cycle(self) -> CycleReport:
        """Discover, scrape, detect and act once. Raises only when discovery itself fails (KubeError)."""
        self.last_started = self.clock()
        try:
            with _gc_paused():
                return self._cycle()
        finally:
            self.last_ended = self.clock()

    def in_progress(self) -> bool:  # a cycle started and has not ended yet
        return self.last_started is not None and (self.last_ended is None or self.last_ended < self.last_started)

    def _cycle(self) -> CycleReport:
        started, requests_before = time.perf_counter(), self.kube.api_requests
        report = CycleReport()
        namespaces = self.lister.list_namespaces(self.namespace_selector)
        pods_by_target = [(t, self.lister.list_pods(t.pod_selector)) for t in self.config.targets]
        listed_at = self.clock()  # before any sample of this cycle: the warm-up counts from here
        found = discover(namespaces, pods_by_target, ever_ready=self.ever_ready,
                         require_controller=self.config.require_controller,
                         allow_loopback=self.config.allow_loopback_pod_ips)
        live = {str((p.get("metadata") or {}).get("uid")) for _, pods in pods_by_target for p in pods}
        self.quarantine.observe(pods_by_target)
        del pods_by_target
        self.ever_ready = (self.ever_ready | found.ready_uids) & live
        self._forget_gone({t.uid for t in found.targets})
        report.pods, report.skipped = len(found.targets), found.skipped
        report.namespaces = Counter(found.modes.values())
        for name, value in invalid_opt_ins(namespaces).items():
            if (name, value) not in self._warned:
                self._warned.add((name, value))
                log.warning("namespace %s has %s=\"%s\", which is neither \"true\" (enforce) nor \"dry-run\": "
                            "not watched", name, NAMESPACE_LABEL, value, extra=facts(namespace=name))

        records = {t.uid: self._record(t) for t in found.targets}
        from_prometheus = [t for t in found.targets if self._sources[t.target_name] == "prometheus"]
        jobs = [(t, records[t.uid]) for t in found.targets if self._sources[t.target_name] != "prometheus"]
        # Every scrape on the scraper's loop, one future for them all; a scraper without a loop (a fake): threads.
        loop = self.scrapes.loop
        batch = self.fanout.submit_async(jobs, self.scrapes.on_loop, loop) if loop is not None else None
        futures = self.fanout.submit(jobs, self.scrapes.timed) if batch is None else {}
        reads: dict[str, Read] = {} if self.prometheus is None else fleet_reads(
            self.prometheus, from_prometheus, records, self._profiles, self.wall_clock(), self._offset)
        scraped = batch.result() if batch is not None else {uid: f.result() for uid, f in futures.items()}
        results = [reads[t.uid] if t.uid in reads else (*scraped[t.uid], records[t.uid].read_at, None)
                   for t in found.targets]
        judged: list[tuple[WatchedPod, PodRecord]] = []
        health = PodHealth()
        for target, (outcome, parsed, t, stamps) in zip(found.targets, results, strict=True):
            report.scrapes[outcome] += 1
            self.metrics.scrapes.labels(outcome).inc()
            pod = records[target.uid]
            pod.note_scrape(target, outcome, self.clock())
            try:
                present = self._judge(target, pod, parsed, report, t, stamps)
            except Exception:  # one pod's trouble never stops the cycle
                log.exception("judging pod %s failed", target.ref, extra=facts(target))
                continue
            judged.append((target, pod))
            health.add(target.namespace, parsed is not None, present)
            if target.uid in found.ready_uids and target.owner_key:
                self.policy.owner_ready(target.owner_key, pod.first_seen)

        self._rails_for_cycle(health, {str(n.get("metadata", {}).get("name")) for n in namespaces}, listed_at)
        self.quarantine.run(judged, self.policy, self._was_leader)  # the gate first: it drains before any deletion
        for target, pod in judged:
            try:
                self._act(target, pod, report)
            except Exception:  # one pod's trouble never stops the cycle
                log.exception("acting on pod %s failed", target.ref, extra=facts(target))

        report.api_requests = self.kube.api_requests - requests_before
        report.duration_s = time.perf_counter() - started
        self._publish(report)
        self.last_success = self.clock()
        self.status = snapshot(found.targets, self.pods, self._profiles, self.policy, now=self.last_success,
                               leader=self._was_leader)
        return report

    def _rails_for_cycle(self, health: PodHealth, namespaces: set[str], listed_at: float) -> None:
        now = self.clock()
        leader = self.leader()
        if leader and not self._was_leader:
            self.policy.forget_budget()  # a new leader reads the deletions of the previous one back
        self._was_leader = leader
        if not self.policy.budget_known:
            restore_budget(self.policy, now, self.wall_clock(), namespaces, self.ledger)
        if self.brake is not None:
            self.policy.set_brake(self.brake.read())
        status = self.policy.begin_cycle(now, watched=health.watched, bad=health.stalled,
                                         namespaces=health.by_namespace, spread=health.spread, listed_at=listed_at)
        for namespace in status.namespaces_tripped:
            watched, bad = health.by_namespace[namespace]
            log.error("namespace breaker OPEN in %s: %d of its %d watched pods look stalled or unknown: deleting "
                      "nothing in that namespace for %g s", namespace, bad, watched,
                      self.config.breaker_cooldown_seconds, extra=facts(namespace=namespace, rule="namespace_breaker"))
        if status.breaker_tripped:
            log.error("mass-stall breaker OPEN: %d of %d watched pods look stalled (threshold %.0f%%, "
                      "at least %d pods, with any one namespace left out): deleting nothing until it stays below "
                      "for %g s", health.stalled,
                      health.watched,
                      100 * self.config.breaker_fraction, self.config.breaker_min_pods,
                      self.config.breaker_cooldown_seconds, extra=facts(rule="breaker"))
        self.metrics.breaker_open.set(int(status.breaker_open))
        self.metrics.leader.set(int(leader))
        self.metrics.paused.set(int(self.policy.paused_by is not None))

    def _record(self, target: WatchedPod) -> PodRecord:
        """The pod's record; a new one when first seen or when a container restarted (detector state reset)."""
        pod = self.pods.get(target.uid)
        if pod is not None and pod.restart_count != target.restart_count:
            log.info("pod %s restarted, restart count %d to %d: detector state reset", target.ref,
                     pod.restart_count, target.restart_count, extra=facts(target, reason="restarted"))
            pod = self.pods[target.uid] = PodRecord(target.restart_count, pod.first_seen, pod.scrape_seconds)
        elif pod is None:
            pod = self.pods[target.uid] = PodRecord(target.restart_count, self.clock())
        return pod

    def _rescrape(self, target: WatchedPod, key: str) -> EngineSnapshot | None:
        if self.prometheus is not None and self._sources[target.target_name] == "prometheus":
            profile = self._profiles[target.target_name]
            outcome, parsed = confirm_read(self.prometheus, profile, target, self.wall_clock())
        else:
            outcome, parsed = self.scrapes.scrape(target)
        self.metrics.scrapes.labels(outcome).inc()
        if parsed is None:
            return None
        return next((s for s in parsed.series if s.key == key), None)

    def _forget_gone(self, live: set[str]) -> None:
        for uid in set(self.pods) - live:
            del self.pods[uid]
        self.remediator.settle_gone(live)  # before the policy forgets them: a removal whose answer was lost
        self.policy.forget_pods(live)
        self.remediator.events.forget_pods(live)  # each pod's walked owner (one walk per pod)

    def _judge(self, target: WatchedPod, pod: PodRecord, parsed: ParseResult | None, report: CycleReport,
               t: float | None = None, stamps: Mapping[Labels, float | None] | None = None) -> set[str]:
        """Feed this cycle's sample (at ``t``; None: now; or each engine series at its own time in ``stamps``, once
        per time: see :meth:`PodRecord.observe`) of every engine series to its detector; return the states of the
        series present in the body (empty when the scrape failed or the body had none)."""
        t = self.clock() if t is None else t
        profile = self._profiles[target.target_name]
        vanished, observations = pod.observe(t, parsed, self.config.window_seconds, lambda: DetectorState(
            self.config.window_seconds, min_samples=self.config.min_samples,
            count_waiting=self.config.count_waiting, signals=profile.progress,
            completion_window_s=self.config.completion_only_window_seconds or None), stamps,
            self.config.prometheus_staleness_seconds)
        for key in vanished:
            log.info("pod %s series {%s} not exported for a window: forgotten", target.ref, key,
                     extra=facts(target, engine=key, reason="vanished"))
            self.policy.episode_over(target.uid, key)
        present: set[str] = set()
        ref, listed = target.ref, report.verdicts
        report.engines.update([seen.verdict.state for seen in observations])
        for seen in observations:
            verdict = seen.verdict
            if seen.present:
                present.add(verdict.state)
            listed.append((ref, seen.key, verdict))
            if verdict.state != seen.previous:
                # "suspect -> stalled: 21 requests running ..." (the reason names its state; unknown's does not)
                said = verdict.reason
                if not said.startswith(verdict.state):
                    said = f"{verdict.state}: {said}"
                log.info("pod %s series {%s}: %s -> %s", target.ref, seen.key, seen.previous or "new", said,
                         extra=facts(target, engine=seen.key, state=verdict.state, reason=verdict.reason))
            self._follow_episode(target, seen.key, seen.engine)
        if not observations:  # no engine series known (scrape failed, or none in the body): one unknown engine
            report.engines["unknown"] += 1
        dropped = pod.cap_series()
        if dropped:
            self.metrics.series_dropped.inc(dropped)
            log.info("pod %s exports more engine series than are watched: %d dropped", target.ref, dropped,
                     extra=facts(target, reason="series_cap"))
        return present

    def _follow_episode(self, target: WatchedPod, key: str, engine: EngineState) -> None:
        """Stall episodes follow the detector's own clock: one opens when the series turns stalled and closes
        only when the engine is seen idle or progressing (the clock restarted), never on a failed scrape."""
        state = engine.verdict.state if engine.verdict else None
        if state == "stalled" and not engine.in_episode:
            engine.in_episode = True
            self.metrics.stalls.inc()
        elif state in SETTLED_STATES:
            engine.in_episode = False
            self.policy.episode_over(target.uid, key)

    def _act(self, target: WatchedPod, pod: PodRecord, report: CycleReport) -> None:
        for _key, engine in sorted(pod.engines.items()):
            if engine.verdict is None or not engine.verdict.stalled or engine.last is None or engine.held:
                continue  # a held verdict (no newer sample from Prometheus) waits for one
            seen_for = self.clock() - pod.first_seen
            result = self.remediator.remediate(target, engine.last, engine.verdict, seen_for_s=seen_for,
                                               signals=self._profiles[target.target_name].progress,
                                               history=engine.history or ())
            if result.result == "skip":
                continue  # this stall episode was already acted on
            report.remediations.append((target.ref, result))
            if result.result in ("deleted", "evicted"):
                self.pods.pop(target.uid, None)
                return  # one deletion per pod

    def _publish(self, report: CycleReport) -> None:
        m = self.metrics
        m.pods_watched.set(report.pods)
        for state in ENGINE_STATES:
            m.engines.labels(state).set(report.engines.get(state, 0))
        m.cycle_duration.observe(report.duration_s)
        m.last_cycle.set(time.time())
        opted = (f"opted-in namespaces {counts(report.namespaces)}" if report.namespaces else
                 f"no opted-in namespace (label one {NAMESPACE_LABEL}=dry-run or =true)")
        remediations = Counter(r.result for _, r in report.remediations)
        log.info(
            "cycle done: %d pods, engines %s, scrapes %s, skipped %s, %s, remediations %s, %d API requests, %.3f s",
            report.pods, counts(report.engines), counts(report.scrapes), counts(report.skipped), opted,
            counts(remediations), report.api_requests, report.duration_s,
            extra={"pods": report.pods, "engines": dict(report.engines), "scrapes": dict(report.scrapes),
                   "skipped": dict(report.skipped), "namespaces": dict(report.namespaces),
                   "remediations": dict(remediations), "api_requests": report.api_requests,
                   "duration_s": round(report.duration_s, 4)},
        )
