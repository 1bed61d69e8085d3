"""One cycle of the watchdog: discover -> scrape (the scraper's event loop) -> detect -> decide -> act.

:meth:`Watchdog.run_cycle` is the only cycle function: the scheduler and ``run --once`` both call it. It
never raises for a single pod's trouble (logged, counted as unknown); an API failure during discovery fails
the whole cycle (logged by the caller), because acting on half a picture is unsafe.

State is kept per engine series, keyed by pod UID plus the engine's labels, dropped when the pod is gone and
reset when the pod's container restart count changes. Sample times come from the monotonic clock: a scraped
sample is stamped when its own body arrived (``ScrapeSource``), never before it (a stamp before the read that showed
progress would start the stall clock early: a deletion on less proven time than the window) and not when the
cycle judged (a cycle waiting for a hung pod's full deadline, the next one not, moved every stamp by seconds and
a window of whole intervals by one interval, at random); the prompt pods are scraped in the same order every cycle
(``fanout.order``), so a pod's body arrives at about the same moment of each. The confirmation scrape before a
deletion reads the pod again after every stamp of its cycle. Source prometheus: Prometheus' own sample times
moved onto it (``promsource``; a sample already fed is not fed again). Each target's pods are read by its
:class:`~watchdog.controller.ports.Source` (``source`` per target); reading and judging never ask which one it is
(only ``vllm_watchdog_source_up{source}`` is kept per kind). Every collaborator is built by :mod:`.wiring`.

API requests: namespaces and pods from ``listing`` (``run``: the watch-based cache) cost none, else 1 + 1 LIST per
target; plus the brake's ConfigMap GET, a few GETs/DELETE/Events per remediation, and Prometheus' queries.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from watchdog.adapters.events import PodRef
from watchdog.adapters.logs import counts, facts
from watchdog.adapters.metrics import EngineSeries, Metrics
from watchdog.config.settings import Settings
from watchdog.controller.brake import Brake
from watchdog.controller.budget import restore_budget
from watchdog.controller.confirmations import Confirmations
from watchdog.controller.fanout import Fanout
from watchdog.controller.ledger import DeletionLedger
from watchdog.controller.nsreads import NamespaceReads, list_by_namespace
from watchdog.controller.ports import Clock, KubeApi, Listing, Source
from watchdog.controller.quarantine import Quarantine
from watchdog.controller.reading import Reading
from watchdog.controller.remediator import Remediation, Remediator
from watchdog.controller.signals import seconds_without_progress, watched_workloads
from watchdog.controller.state import EngineRecord, PodRecord
from watchdog.controller.status import Snapshot, snapshot
from watchdog.controller.tallies import BreakerTallies
from watchdog.core.confirm import no_evidence, not_confirmed
from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.discovery import Discovery, Overlap, discover, invalid_opt_ins
from watchdog.core.events import REASON_PAUSE_IGNORED, REASON_TARGETS_OVERLAP, REASON_WINDOW_IGNORED, utc_stamp
from watchdog.core.model import MAX_CLOCK_SKEW_S, NAMESPACE_LABEL, PAUSE_ANNOTATION, Target, WatchedPod
from watchdog.core.podpolicy import EffectivePolicy
from watchdog.core.policy import CycleFacts, DeletionPolicy, Rails
from watchdog.core.profiles import Profile
from watchdog.core.sourcehealth import FAILED_CYCLES, SourceHealth
from watchdog.core.vocab import ENGINE_STATES, SETTLED_STATES

log = logging.getLogger(__name__)


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
    workload_engines: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (state, namespace, target)
    engine_progress: dict[EngineSeries, float] = field(default_factory=dict)  # perEngineMetrics: seconds by series
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
    """Holds the state between cycles; built by :func:`watchdog.controller.wiring.build` (every collaborator passed
    in). ``clock``: seconds, monotonic; ``sources``: target name -> its source; ``profiles``: target name -> its
    engine profile."""

    def __init__(self, config: Settings, kube: KubeApi, *, metrics: Metrics, policy: DeletionPolicy,
                 remediator: Remediator, quarantine: Quarantine, sources: Mapping[str, Source],
                 profiles: Mapping[str, Profile], fanout: Fanout, clock: Clock, wall_clock: Clock,
                 leader: Callable[[], int], confirmations: Confirmations, ledger: DeletionLedger | None = None,
                 brake: Brake | None = None, listing: Listing | None = None) -> None:
        self.config, self.kube, self.clock, self.wall_clock, self.leader = config, kube, clock, wall_clock, leader
        self.listing = listing  # the watch-based cache (closed with the watchdog), when set
        self.lister: Listing | KubeApi = listing or kube  # where namespaces and pods come from each cycle
        self.metrics, self.policy, self.remediator, self.quarantine = metrics, policy, remediator, quarantine
        self.ledger = ledger  # the deletion ledger (budgetLedger), when on
        self.sources, self._profiles = sources, profiles
        self.confirmations = confirmations  # the remediator's confirmation reads (once per pod per cycle)
        self.fanout = fanout  # the scrapes' fan-out (its size is logged when a cycle overruns)
        self.namespace_selector = ",".join(filter(None, [NAMESPACE_LABEL, config.namespace_selector]))
        self.pods: dict[str, PodRecord] = {}  # pod UID -> everything remembered about it
        self.ever_ready: set[str] = set()  # pod UIDs seen Ready (discovery judges pods once Ready)
        self._term = 0  # the leadership term the last cycle ran in (0: not leader)
        self.clock_skew_s: float | None = None  # this wall clock minus the API server's, as of the last cycle
        self._warned: set[tuple[str, str]] = set()  # (namespace, label value) already warned about
        self._targets = {t.name: t for t in config.targets}
        # (pod UID, Event reason) -> (what was told, whether its Event was sent): see _tell_once
        self._told: dict[tuple[str, str], tuple[str, bool]] = {}
        self._engines_capped = False  # the per-engine gauge's cap was reached (logged once)
        self.last_started: float | None = None  # monotonic time the last cycle started (liveness)
        self.last_ended: float | None = None  # monotonic time the last cycle ended, completed or failed
        self.last_success: float | None = None  # monotonic time the last cycle completed (readiness)
        self.last_failure: tuple[float, str] | None = None  # (monotonic time, one line) of the last failed cycle
        self.status: Snapshot | None = None  # what the last completed cycle saw (GET /status)
        self.brake = brake  # the run-time brake (pauseConfigMap), read every cycle
        self.metrics.leader.set(int(bool(leader())))  # from the start: without election always 1, before a cycle
        if brake is not None:
            self.policy.set_brake(brake.why)
        self.metrics.paused.set(int(self.policy.paused_by is not None))
        self.source_kind = {t.name: config.source_of(t) for t in config.targets}  # target name -> its source
        self.source_by_kind = {kind: sources[name] for name, kind in self.source_kind.items()}
        self.source_health = {kind: SourceHealth() for kind in sorted(set(self.source_kind.values()))}
        watched = config.namespaces_watched  # namespace-only mode: each namespace's pods read on their own
        self.namespace_reads = NamespaceReads(watched, metrics, clock) if watched is not None else None
        for kind in self.source_health:
            self.metrics.source_up.labels(kind).set(1)
            self.metrics.source_failed_cycles.labels(kind).set(0)

    def close(self) -> None:
        for source in {id(s): s for s in self.sources.values()}.values():
            source.close()
        if self.listing is not None:
            self.listing.close()

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
        self.confirmations.begin_cycle()
        found, listed_at = self._discover(report)
        records = {t.uid: self._record(t) for t in found.targets}
        readings = self._read(found.targets, records)
        self._tally_sources(found.targets, readings)
        tallies = BreakerTallies()
        judged = [(target, records[target.uid]) for target in found.targets
                  if self._take(target, records[target.uid], readings[target.uid], report, tallies)]
        for target, pod in judged:
            if target.uid in found.ready_uids and target.owner_key:
                self.policy.owner_ready(target.owner_key, pod.first_seen)
        this_cycle = self._rails_for_cycle(tallies, listed_at)
        self.quarantine.run(judged, self.policy, this_cycle)  # the gate first: it drains before any deletion
        # Longest stalled first (ties: discovery order): a freed budget slot goes to the wedge held longest, so a
        # tenant whose pods keep wedging cannot win every slot and hold another tenant's wedge back for good.
        for target, pod in sorted(judged, key=lambda j: -j[1].stalled_for()):
            try:
                self._act(target, pod, report, this_cycle)
            except Exception:  # one pod's trouble never stops the cycle
                log.exception("acting on pod %s failed", target.ref, extra=facts(target))
        report.api_requests = self.kube.api_requests - requests_before
        report.duration_s = time.perf_counter() - started
        self._publish(report, {t.namespace: t.tenant for t in found.targets})
        self.last_success = self.clock()
        self.status = snapshot(found.targets, self.pods, self._profiles, self.policy, now=self.last_success,
                               leader=this_cycle.leader, clock_skew_s=self.clock_skew_s,
                               unreadable=self.namespace_reads.unreadable if self.namespace_reads else {},
                               conflicts=[o for o in found.overlaps if o.chosen is None])
        return report

    def _discover(self, report: CycleReport) -> tuple[Discovery, float]:
        """This cycle's pods and the moment they were listed (the warm-up counts from there); what is gone is
        forgotten."""
        namespaces = self.lister.list_namespaces(self.namespace_selector)
        watched = self.config.namespaces_watched  # namespace-only mode: pods listed in each of those alone
        pods_by_target = self._list_pods(namespaces)
        listed_at = self.clock()  # before any sample of this cycle: the warm-up counts from here
        found = discover(namespaces, pods_by_target, base=self.config.base_policy, ever_ready=self.ever_ready,
                         require_controller=self.config.require_controller,
                         allow_loopback=self.config.allow_loopback_pod_ips, tenant_label=self.config.tenant_label)
        live = {str((p.get("metadata") or {}).get("uid")) for _, pods in pods_by_target for p in pods}
        self.quarantine.observe(pods_by_target)
        del pods_by_target
        self.ever_ready = (self.ever_ready | found.ready_uids) & live
        self.metrics.watch_workloads(watched_workloads(found.modes, [t.name for t in self.config.targets], watched))
        self._forget_gone({t.uid for t in found.targets})
        self._tell_overlaps(found.overlaps)
        report.pods, report.skipped = len(found.targets), found.skipped
        report.namespaces = Counter(found.modes.values())
        for name, value in invalid_opt_ins(namespaces).items():
            if (name, value) not in self._warned:
                self._warned.add((name, value))
                log.warning("namespace %s has %s=\"%s\", which is neither \"true\" (enforce) nor \"dry-run\": "
                            "not watched", name, NAMESPACE_LABEL, value, extra=facts(namespace=name))
        return found, listed_at

    def _list_pods(self, namespaces: list[dict[str, Any]]) -> list[tuple[Target, list[dict[str, Any]]]]:
        """Every target's pods: in one list each, or (namespace-only mode) namespace by namespace, where a namespace
        whose list fails is unreadable (:mod:`watchdog.controller.nsreads`) and the others are listed as ever."""
        if self.namespace_reads is None:
            return [(t, self.lister.list_pods(t.pod_selector)) for t in self.config.targets]
        present = self.namespace_reads.opted_in({str((ns.get("metadata") or {}).get("name")) for ns in namespaces})
        if self.listing is not None:
            self.listing.keep_pods_of(present)  # a namespace deleted or opted out: its informers stopped
        pods_by_target, failed = list_by_namespace(self.lister.list_pods, self.config.targets, present)
        self.namespace_reads.cycle(failed)
        return pods_by_target

    def namespaces_down(self) -> str | None:
        """Why no watched namespace's pods can be listed (one line, for /readyz), None while one can (or in the
        default mode, where a failed list fails the whole cycle)."""
        return self.namespace_reads.everywhere() if self.namespace_reads is not None else None

    def _read(self, targets: Sequence[WatchedPod], records: Mapping[str, PodRecord]) -> dict[str, Reading]:
        """Every pod's reading, each from its target's source: every source started before any is waited for."""
        by_source: dict[int, tuple[Source, list[tuple[WatchedPod, PodRecord]]]] = {}
        for t in targets:
            source = self.sources[t.target_name]
            by_source.setdefault(id(source), (source, []))[1].append((t, records[t.uid]))
        waits = [source.start(pods) for source, pods in by_source.values()]
        readings: dict[str, Reading] = {}
        for wait in waits:
            readings.update(wait())
        return readings

    def _tally_sources(self, targets: Sequence[WatchedPod], readings: Mapping[str, Reading]) -> None:
        """Each source's health after this cycle's reads (:mod:`watchdog.core.sourcehealth`); a change is logged."""
        reads: dict[str, list[tuple[str, str]]] = {kind: [] for kind in self.source_health}
        for t in targets:
            r = readings[t.uid]
            reads[self.source_kind[t.target_name]].append((r.outcome, f"{r.what}: {r.detail}" if r.what else r.detail))
        for kind, source in self.source_by_kind.items():
            if not reads[kind] and (probe := source.probe()) is not None:  # no pod due: the source's own read
                reads[kind].append(probe)
        for kind, before in self.source_health.items():
            after = self.source_health[kind] = before.after(reads[kind])
            self.metrics.source_up.labels(kind).set(int(after.up))
            self.metrics.source_failed_cycles.labels(kind).set(after.failed_cycles)
            if before.up and not after.up:
                log.error("%s", self._source_why(kind, after), extra=facts(reason="source_down"))
            elif after.up and not before.up:
                log.info("source %s read a pod again: up", kind, extra=facts(reason="source_up"))

    def source_down(self) -> str | None:
        """Why a source cannot be read (one line, for /readyz), None while every source in use reads."""
        return next((self._source_why(k, h) for k, h in self.source_health.items() if not h.up), None)

    def _source_why(self, kind: str, health: SourceHealth) -> str:
        return (f"source {self.source_by_kind[kind].where} has read no pod for {health.failed_cycles} cycles in a "
                f"row (down after {FAILED_CYCLES}): {health.why}")

    def _take(self, target: WatchedPod, pod: PodRecord, reading: Reading, report: CycleReport,
              tallies: BreakerTallies) -> bool:
        """Take one pod's reading in and judge its engine series; False when judging failed (logged)."""
        report.scrapes[reading.outcome] += 1
        self.metrics.scrapes.labels(reading.outcome).inc()
        pod.take(target, reading, self.clock(), direct=self.source_kind[target.target_name] == "scrape")
        try:
            present = self._judge(target, pod, reading, report)
        except Exception:  # one pod's trouble never stops the cycle
            log.exception("judging pod %s failed", target.ref, extra=facts(target))
            return False
        if not pod.direct and not self._stall_confirmed(target, pod):
            present.discard("stalled")  # not evidence for the breakers or the gate (yet): see _stall_confirmed
        tallies.add(target, reading.parsed is not None, present)
        return True

    def _stall_confirmed(self, target: WatchedPod, pod: PodRecord) -> bool:
        """Whether the stall of a pod read from Prometheus counts in the breakers: only once a direct read of the pod
        showed it (the confirmation read, :mod:`~watchdog.controller.confirmations`, judged by the rule of the
        confirmation before a removal; once per stall episode of a series; source scrape's own read is direct). A
        series in Prometheus can carry any pod's labels, ``instance`` included (``honorLabels``): stalls forged for
        other tenants' pods would open the fleet breaker and hold back everyone's wedges, though never confirmed."""
        def confirm(stalled: dict[str, EngineRecord]) -> set[str]:
            read = self.confirmations.read(target)
            if isinstance(read, str):
                return set()
            fresh = {s.key: s for s in read.series}
            completion_only = bool(pod.policy and pod.policy.completion_only_window_s)
            return {key for key, e in stalled.items() if e.last is not None and key in fresh and (no_evidence(
                fresh[key], e.detector.signals, completion_only) or not_confirmed(
                    e.last, fresh[key], e.detector.count_waiting, e.detector.signals)) is None}
        return pod.stall_confirmed(confirm)

    def _check_clock(self) -> None:
        """Compare this replica's wall clock with the API server's (the ledger's clock): said once when they
        disagree by more than :data:`MAX_CLOCK_SKEW_S` (and when they agree again), always in the gauge and /status."""
        server = self.kube.server_time()
        if server is None:
            return
        skew, was = self.wall_clock() - server, self.clock_skew_s
        self.clock_skew_s = skew
        self.metrics.clock_skew.set(round(skew, 1))
        off, was_off = abs(skew) > MAX_CLOCK_SKEW_S, was is not None and abs(was) > MAX_CLOCK_SKEW_S
        if off and not was_off:
            log.warning("this replica's clock is %+.0f s off the Kubernetes API server's (more than %g s): the "
                        "deletion ledger keeps the server's clock, but fix this node's time sync (NTP)", skew,
                        MAX_CLOCK_SKEW_S, extra=facts(reason="clock_skew"))
        elif was_off and not off:
            log.info("this replica's clock agrees with the API server's again (%+.1f s)", skew)

    def _rails_for_cycle(self, health: BreakerTallies, listed_at: float) -> CycleFacts:
        """This cycle's facts (leadership read here, once) and the rails brought up to date for it."""
        self._check_clock()
        now = self.clock()
        term = self.leader()
        this_cycle = CycleFacts(leader=bool(term))
        if this_cycle.leader and term != self._term:  # a new term (won, or lost and won back since the last cycle):
            self.policy.forget_budget()   # the deletions of the leaders in between are read back
        self._term = term
        if not self.policy.budget_known:  # until it is read back: the policy's rule budget_unknown
            restore_budget(self.policy, now, self.ledger)
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
            log.error("mass-stall breaker OPEN: %d of %d pods in enforced namespaces look stalled (threshold "
                      "%.0f%%, at least %d pods, with any one tenant left out): deleting nothing until it stays below "
                      "for %g s", health.stalled, health.watched, 100 * self.config.breaker_fraction,
                      self.config.breaker_min_pods,
                      self.config.breaker_cooldown_seconds, extra=facts(rule="breaker"))
        self.metrics.breaker_open.set(int(status.breaker_open))
        self.metrics.leader.set(int(this_cycle.leader))
        self.metrics.paused.set(int(self.policy.paused_by is not None))
        return this_cycle

    def _record(self, target: WatchedPod) -> PodRecord:
        """The pod's record; a new one when first seen, when a container restarted or when its effective policy
        changed (detector state reset: the detectors are built with the policy's window)."""
        pod = self.pods.get(target.uid)
        policy = self._policy(target)
        if pod is not None and pod.restart_count != target.restart_count:
            log.info("pod %s restarted, restart count %d to %d: detector state reset", target.ref,
                     pod.restart_count, target.restart_count, extra=facts(target, reason="restarted"))
            pod = self.pods[target.uid] = PodRecord(target.restart_count, pod.first_seen, pod.scrape_seconds)
        elif pod is not None and pod.policy is not None and pod.policy != policy:
            log.info("pod %s stall policy is now %s (was %s): detector state reset", target.ref, policy.describe(),
                     pod.policy.describe(), extra=facts(target, reason="policy_changed"))
            pod = self.pods[target.uid] = PodRecord(target.restart_count, pod.first_seen, pod.scrape_seconds)
        elif pod is None:
            pod = self.pods[target.uid] = PodRecord(target.restart_count, self.clock())
        pod.use_policy(policy)
        return pod

    def _policy(self, target: WatchedPod) -> EffectivePolicy:
        """The pod's effective policy (:meth:`Settings.policy_of`, the one rule); an ignored window annotation is
        logged and told in one Warning Event per pod, named so that a restart does not write it again."""
        policy, ignored = self.config.policy_of(self._targets.get(target.target_name), target.window_annotation)
        if ignored:
            self._tell_once(target, REASON_WINDOW_IGNORED, "", f"{ignored}; its window stays {policy.window_s:g} s "
                            f"({policy.window_source})", f"{ignored}; the stall window stays {policy.window_s:g} s "
                            f"(from the {policy.window_source} setting)", "window_annotation_ignored")
        return policy

    def _tell_once(self, pod: PodRef, reason: str, value: str, said: str, message: str, why: str) -> None:
        """Say one thing about a pod once: a WARNING line ``said`` (log field reason ``why``) whenever ``value`` is
        new for (pod, ``reason``), and its named Warning Event ``message`` until one is sent (a standby's is not: it
        writes it once it leads; a restart finds it written), then never again for the pod UID and reason, whatever
        the value (a tenant flipping its annotation every cycle costs no write). Forgotten with the pod."""
        key = (pod.uid, reason)
        told = self._told.get(key)
        if told is not None and told == (value, True):
            return
        if told is None or told[0] != value:
            log.warning("pod %s/%s: %s", pod.namespace, pod.name, said,
                        extra=facts(namespace=pod.namespace, pod=pod.name, uid=pod.uid, reason=why))
        sent = told is not None and told[1]
        self._told[key] = (value, sent or self.remediator.events.once_on_pod(pod, reason, message))

    def _tell_overlaps(self, overlaps: Sequence[Overlap]) -> None:
        """Each pod several differing targets match (:func:`~watchdog.core.podpolicy.resolve_target` says which one
        judges it, or that none does): logged once per pod UID, told in ONE Warning Event per pod UID (a named
        Event: a restart finds it written and does not repeat it), counted in a gauge every cycle."""
        conflicts = sum(o.chosen is None for o in overlaps)
        self.metrics.targets_overlap.labels("judged").set(len(overlaps) - conflicts)
        self.metrics.targets_overlap.labels("conflict").set(conflicts)
        overlapping = {o.uid for o in overlaps}  # one no longer overlapping: logged again if it does, its Event sent
        self._told = {k: v if k[1] != REASON_TARGETS_OVERLAP or k[0] in overlapping else ("", v[1])
                      for k, v in self._told.items()}
        for o in overlaps:
            self._tell_once(o, REASON_TARGETS_OVERLAP, o.note, o.note, o.note,
                            "targets_conflict" if o.chosen is None else "targets_overlap")

    def _pause(self, target: WatchedPod) -> str:
        """Why the pod's engines read paused now by its pause annotation (:meth:`Settings.paused_until`, the one
        rule), or "" (none, past, ignored); an ignored value is logged and told in one Warning Event per pod and
        value."""
        raw = target.pause_annotation
        until, ignored = self.config.paused_until(raw, self.wall_clock())
        if ignored and raw is not None:
            self._tell_once(target, REASON_PAUSE_IGNORED, raw, f"{ignored}; its engines are judged by their metrics",
                            f"{ignored}; its engines are judged by their metrics, as without it",
                            "pause_annotation_ignored")
        if until is None:
            return ""
        return (f"its pod's annotation {PAUSE_ANNOTATION} holds it paused until "
                f"{utc_stamp(dt.datetime.fromtimestamp(until, dt.UTC))}")

    def _forget_gone(self, live: set[str]) -> None:
        for uid in set(self.pods) - live:
            del self.pods[uid]
        self._told = {k: v for k, v in self._told.items() if k[0] in live}
        self.confirmations.forget_pods(live)
        self.remediator.settle_gone(live)  # before the policy forgets them: a removal whose answer was lost
        self.policy.forget_pods(live)
        self.remediator.events.forget_pods(live)  # each pod's walked owner (one walk per pod)

    def _judge(self, target: WatchedPod, pod: PodRecord, reading: Reading, report: CycleReport) -> set[str]:
        """Feed this cycle's sample (at the reading's ``t``; None: now; or each engine series at its own time in its
        ``stamps``, once per time: see :meth:`PodRecord.observe`) of every engine series to its detector; return the
        states of the series present in the body (empty when the read failed or the body had none)."""
        t = self.clock() if reading.t is None else reading.t
        profile = self._profiles[target.target_name]
        policy = pod.policy or self._policy(target)  # the pod's effective window, busy samples, completion window
        paused_by = self._pause(target)
        vanished, observations = pod.observe(t, reading.parsed, policy.window_s, lambda: DetectorState(
            policy.window_s, min_samples=policy.min_samples,
            count_waiting=self.config.count_waiting, signals=profile.progress,
            completion_window_s=policy.completion_only_window_s or None), reading.stamps,
            self.config.prometheus_staleness_seconds, paused_by)
        for key in vanished:
            log.info("pod %s series {%s} not exported for a window: forgotten", target.ref, key,
                     extra=facts(target, engine=key, reason="vanished"))
            self.policy.episode_over(target.uid, key)
        present: set[str] = set()
        ref, listed = target.ref, report.verdicts
        states = Counter([seen.verdict.state for seen in observations])
        report.engines.update(states)
        workload = (target.namespace, target.target_name)
        report.workload_engines.update({(state, *workload): count for state, count in states.items()})
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
            if verdict.state == "stalled" and self.policy.stalled(target.uid, seen.key):
                self.metrics.stalls.labels(*workload).inc()
            elif verdict.state in SETTLED_STATES:
                self.policy.episode_over(target.uid, seen.key)
        if not observations:  # no engine series known (scrape failed, or none in the body): one unknown engine
            report.engines["unknown"] += 1
            report.workload_engines[("unknown", *workload)] += 1
        dropped = pod.cap_series()
        if dropped:
            self.metrics.series_dropped.inc(dropped)
            log.info("pod %s exports more engine series than are watched: %d dropped", target.ref, dropped,
                     extra=facts(target, reason="series_cap"))
        if self.config.per_engine_metrics:  # after the cap: at most MAX_SERIES_PER_POD series per pod
            for key, engine in pod.engines.items():
                series = (target.namespace, target.name, target.target_name, key)
                report.engine_progress[series] = seconds_without_progress(engine.verdict)
        return present

    def _act(self, target: WatchedPod, pod: PodRecord, report: CycleReport, this_cycle: CycleFacts) -> None:
        for key, engine in sorted(pod.engines.items()):
            if engine.verdict is None or engine.verdict.state != "stalled" or engine.last is None or engine.held:
                continue  # a held verdict (no newer sample from Prometheus) waits for one
            result = self.remediator.remediate(target, pod, key, this_cycle)
            if result.result == "skip":
                continue  # this stall episode was already acted on
            report.remediations.append((target.ref, result))
            if result.result in ("deleted", "evicted"):
                self.pods.pop(target.uid, None)
                return  # one deletion per pod

    def _publish(self, report: CycleReport, tenants: Mapping[str, str]) -> None:
        """The cycle's metrics and its log line; ``tenants``: namespace -> its tenant (the per-engine gauge's share)."""
        m = self.metrics
        m.pods_watched.set(report.pods)
        m.set_per_workload(m.engines, report.workload_engines, [(state,) for state in ENGINE_STATES])
        if m.publish_engines(report.engine_progress, tenants) and not self._engines_capped:
            self._engines_capped = True  # said once: the cap holds from then on
            log.warning("more engine series than the per-engine gauge exports (%d): shared out per tenant, those "
                        "longest without progress are exported", len(m.engine_series),
                        extra=facts(reason="engine_series_cap"))
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
