"""The one place that removes pods (I/O): :meth:`Remediator.remediate` takes one stalled engine series through the
steps of docs/architecture.md "One removal, step by step": decide (the pure
:meth:`~watchdog.core.policy.DeletionPolicy.decide`; dry-run: a ``StalledPodDryRun`` Event and stop), verify
(:meth:`Remediator._confirmed`: a fresh GET re-applying discovery's rules, the confirmation read judged by
:mod:`watchdog.core.confirm`; then the episode's evidence, its slow log read before the fence), apply
(:meth:`~watchdog.controller.actuator.Actuator.remove`), settle (the pure
:meth:`~watchdog.core.policy.DeletionPolicy.settle`) and say it: Events (best effort, one per pod, reason and rule
per stall episode), the log line and the counters. docs/safety.md "The order of the decision" says what each outcome
means to an operator.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field, replace
from typing import Literal

from watchdog.adapters.events import EventRecorder
from watchdog.adapters.kube import KubeError
from watchdog.adapters.logs import facts
from watchdog.adapters.metrics import Metrics
from watchdog.controller.actuator import Actuator, Removal
from watchdog.controller.confirmations import Confirmations
from watchdog.controller.evidence import EvidenceKeeper
from watchdog.controller.ports import Clock, Escalation, KubeApi
from watchdog.controller.state import PodRecord
from watchdog.core.confirm import no_evidence, not_confirmed
from watchdog.core.detector import DetectorState, Verdict
from watchdog.core.discovery import recheck
from watchdog.core.events import (
    REASON_DEFERRED,
    REASON_DELETED,
    REASON_DRY_RUN,
    StallOutcome,
    frees_phrase,
    stall_message,
)
from watchdog.core.evidence import pointer
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.policy import (
    CycleFacts,
    Decision,
    DeletionPolicy,
    not_leader,
)
from watchdog.core.vocab import DecisionRule, RemediationResult, RemovalAction, WindowSource

log = logging.getLogger("watchdog.controller.remediator")
#: What a removal did, per action: its result and the Event's and the log's wording.
_PAST: dict[RemovalAction, Literal["deleted", "evicted"]] = {"delete": "deleted", "evict": "evicted"}


@dataclass(frozen=True)
class _Acting:
    """One stalled engine series being acted on: what its Events and log lines say, as data (kept across cycles for
    a removal whose answer was lost, never as a closure). ``since``: the stall clock's start (wall clock);
    ``evidence``: the episode's evidence record id, once kept."""

    target: WatchedPod
    key: str
    verdict: Verdict
    since: dt.datetime
    window_source: WindowSource
    evidence: str = ""

    def say(self, outcome: StallOutcome, rule: str, why: str, frees: str = "") -> str:
        """The Event message for ``outcome`` (:func:`~watchdog.core.events.stall_message` says what each part is)."""
        return stall_message(outcome, self.target.ref, self.key, self.verdict, self.since, rule=rule, why=why,
                             frees=frees, evidence=pointer(self.evidence) if self.evidence else "",
                             window_source=self.window_source)


@dataclass(frozen=True)
class Remediation:
    """What one remediation did: ``result``, a one-line ``detail`` and, for a deferral, the ``rule``; ``counted``:
    it counts in remediations_total (a deferral only once per stall episode)."""

    result: RemediationResult
    detail: str
    rule: DecisionRule | Literal[""] = ""
    counted: bool = field(default=True, compare=False)


def pod_age_s(target: WatchedPod, wall_now: float, seen_for_s: float) -> float | None:
    """Seconds since ``metadata.creationTimestamp`` (wall clock, as the API reports it), but never less than
    ``seen_for_s`` (how long this process has watched the pod, monotonic), so a wall clock jumping back cannot
    hold a wedged pod for hours. None when the timestamp is unknown and the pod was never seen before."""
    try:
        created = dt.datetime.strptime(target.created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return seen_for_s or None
    return max(wall_now - created.timestamp(), seen_for_s)


class Remediator:
    """Removes stalled pods through :meth:`remediate` only. ``grace_period_s`` None keeps the pod's own; ``clock``:
    monotonic seconds; ``wall_clock``: Unix seconds (pod age, the Events' times); ``escalation``: node escalation or
    None."""

    def __init__(self, kube: KubeApi, policy: DeletionPolicy, confirmations: Confirmations, metrics: Metrics, *,
                 actuator: Actuator, events: EventRecorder, evidence: EvidenceKeeper,
                 grace_period_s: int | None, require_controller: bool, clock: Clock, wall_clock: Clock,
                 escalation: Escalation | None) -> None:
        self.kube, self.policy, self.confirmations, self.metrics = kube, policy, confirmations, metrics
        self.actuator, self.events, self.evidence = actuator, events, evidence
        self.grace_period_s, self.require_controller = grace_period_s, require_controller
        self.clock, self.wall_clock, self.escalation = clock, wall_clock, escalation

    def remediate(self, target: WatchedPod, pod: PodRecord, key: str, facts: CycleFacts) -> Remediation:
        """Act on the stalled engine series ``key`` of ``target`` as its record ``pod`` holds it, with the cycle's
        ``facts`` (its reading of leadership, the only one). Every outcome but ``skip`` is logged once."""
        outcome = self._remediate(target, pod, key, facts)
        self._tell(target, key, outcome, "stalled")
        return outcome

    def _tell(self, target: WatchedPod, key: str, outcome: Remediation, state: str = "") -> None:
        """Count ``outcome`` in remediations_total{result,namespace,target} and log it (skip is neither)."""
        if outcome.result == "skip":
            return
        if outcome.counted:
            self.metrics.remediations.labels(outcome.result, target.namespace, target.target_name).inc()
        log.log(logging.WARNING if outcome.result in ("deleted", "evicted", "dry_run", "error") else logging.INFO,
                "remediation %s: %s", outcome.result, outcome.detail, extra=facts(
                    target, engine=key, state=state, result=outcome.result, rule=outcome.rule, reason=outcome.detail))

    def _remediate(self, target: WatchedPod, pod: PodRecord, key: str, facts: CycleFacts) -> Remediation:
        engine, policy = pod.engines[key], pod.policy
        series, verdict = engine.last, engine.verdict
        if series is None or verdict is None or policy is None:
            return Remediation("skip", "nothing judged yet")
        if policy.action == "quarantine":  # drain through the readiness gate only: nothing removed here
            return Remediation("skip", "action quarantine: the readiness gate drains, nothing is removed")
        now = self.clock()
        age = pod_age_s(target, self.wall_clock(), now - pod.first_seen)
        decision = self.policy.decide(
            uid=target.uid, series=series.key, namespace=target.namespace, namespace_mode=target.mode,
            owner=target.owner_key, pod_age_s=age, now=now, leader=facts.leader)
        if decision.action == "skip":
            return Remediation("skip", decision.why)
        # The stall clock's start (its sample time minus the stall), from the monotonic clock to the wall clock.
        start = (verdict.t if verdict.t is not None else now) - verdict.stalled_for_s
        since = dt.datetime.fromtimestamp(self.wall_clock() - (now - start), dt.UTC)
        stall = _Acting(target, key, verdict, since, policy.window_source)

        def keep(outcome: str, final: EngineSnapshot, final_from: str) -> str:
            """The episode's evidence record, kept once (its log read once): a removal tried again points to it."""
            return self.policy.evidence(target.uid, key, lambda: self.evidence.keep(
                target, verdict, engine.history or (), outcome=outcome, final=final, final_from=final_from,
                engine=key, signals=engine.detector.signals, window_source=policy.window_source))

        if decision.action == "dry_run":
            self.policy.record(target.uid, series.key, "dry_run")
            if not self.policy.first_event(target.uid, series.key, REASON_DRY_RUN):
                return Remediation("dry_run", f"would delete {target.ref}: {decision.why} (announced already for "
                                   "another engine series of this pod)", decision.rule)
            stall = replace(stall, evidence=keep("dry_run", series, "cycle"))
            self.events.on_pod_and_owner(target, REASON_DRY_RUN, stall.say("dry_run", "", decision.why))
            return Remediation("dry_run", f"would delete {target.ref}: {decision.why}", decision.rule)
        if decision.action == "defer":
            return self._defer(stall, decision, now)
        unsettled = self.policy.unsettled.get((target.uid, key)) if decision.action == "retry" else None
        if unsettled is not None and self.actuator.gone(target) is True:  # its lost answer's removal happened after all
            lost, verb = unsettled
            return self._removed(lost, verb, "its answer was lost and the pod is gone or terminating since")
        fresh = self._confirmed(target, series, engine.detector, policy.completion_only_window_s > 0)
        if isinstance(fresh, Remediation):
            return fresh
        stall = replace(stall, evidence=keep(policy.action, fresh, "confirmation"))  # the log read: before the fence
        return self._remove(stall, policy.action, now, retry=decision.action == "retry")

    def _confirmed(self, target: WatchedPod, series: EngineSnapshot, detector: DetectorState, completion_only: bool,
                   ) -> EngineSnapshot | Remediation:
        """The fresh GET and the confirmation read, judged as ``detector`` judges (completion-only signals alone are
        evidence when ``completion_only``): the fresh snapshot that confirms the stall, or why not."""
        try:
            pod = self.kube.get_pod(target.namespace, target.name)
            namespace = self.kube.get_namespace(target.namespace) if pod is not None else None
        except KubeError as exc:  # refused credentials are an error (alerted on), anything else a retry next cycle
            return Remediation("error" if exc.status in (401, 403) else "aborted",
                               f"pod {target.ref}: fresh GET failed ({exc}); retrying next cycle")
        changed = recheck(pod, namespace, target, require_controller=self.require_controller)  # discovery's rules
        if changed:
            return Remediation("aborted", f"pod {target.ref} changed since the decision: {changed}")
        read = self.confirmations.read(target)  # once per pod per cycle, bounded per tenant
        if isinstance(read, str):  # unknown now: nothing is removed unconfirmed
            return Remediation("aborted", f"not confirmed: {read}; retrying next cycle")
        fresh = next((s for s in read.series if s.key == series.key), None)
        if fresh is None:
            return Remediation("aborted",
                               f"re-scrape of {target.url} gave no evidence (no series); retrying next cycle")
        why = no_evidence(fresh, detector.signals, completion_only)
        if why is not None:
            return Remediation("aborted", f"re-scrape of {target.url} gave {why}; retrying next cycle")
        why = not_confirmed(series, fresh, detector.count_waiting, detector.signals)
        if why is not None:
            return Remediation("aborted", f"engine recovered before deletion: {why}")
        return fresh

    def _remove(self, stall: _Acting, verb: RemovalAction, now: float, *, retry: bool) -> Remediation:
        """The removal sent (:meth:`Actuator.remove`), settled (:meth:`DeletionPolicy.settle`) and said."""
        target, key = stall.target, stall.key
        applied = self.actuator.remove(Removal(target, verb, self.grace_period_s), again=retry)
        self.policy.settle(applied.outcome, self.clock(), uid=target.uid, series=key, namespace=target.namespace,
                           owner=target.owner_key, again=retry, pending=(stall, verb))
        if applied.outcome in ("done", "lost") and not retry:
            self.metrics.deletions.labels(verb, target.namespace, target.target_name).inc()  # as the budget counts
        match applied.outcome:
            case "done":
                note = (f"the {verb} answer was lost ({applied.reason}) and the pod is gone or terminating"
                        if applied.reason else "sent again after a lost answer" if retry else "")
                return self._removed(stall, verb, note)
            case "lost":  # charged, not seen to happen: sent again next cycle while the stall lasts
                return Remediation("error", f"{verb} {target.ref}: {applied.error}: charged to the budgets (fail "
                                   "closed), sent again next cycle with the same UID precondition")
            case "unrecorded":
                return self._defer(stall, Decision("defer", "ledger", applied.error, None, "once the deletion "
                                                   "ledger can be written (tried every cycle)"), now)
            case "fenced":  # not sent; its ledger intent keeps counting (fail closed): the fence holds off writes
                return self._defer(stall, not_leader(applied.error), now)
            case "blocked" | "several_pdbs":  # a 429: not applied (its intent withdrawn); sent again after a backoff
                why = ("the Eviction API refused (a PodDisruptionBudget would be violated)"
                       if applied.outcome == "blocked" else "the Eviction API refuses pods selected by more than one "
                       "PodDisruptionBudget; fix the overlapping PDBs")
                return self._defer(stall, self.policy.refused(target.uid, key, now, why), now)
            case "refused":
                return Remediation("error", f"{verb} {target.ref} refused, not retried: {applied.error}")
        why = "already gone" if applied.outcome == "not_found" else "UID precondition failed: the name is a new pod"
        return Remediation("not_found" if applied.outcome == "not_found" else "conflict",
                          f"nothing {_PAST[verb]} for {target.ref}: {why}")

    def settle_gone(self, watched_uids: set[str]) -> None:
        """Pods whose removal's answer was lost and that are no longer watched: a GET says what became of them (gone,
        terminating or replaced: reported once, with its Events; still there: dropped without a word, its charge
        stays; unreadable: asked again next cycle)."""
        for episode in [key for key in self.policy.unsettled if key[0] not in watched_uids]:
            stall, verb = self.policy.unsettled[episode]
            fate = self.actuator.gone(stall.target)
            if fate is False:
                del self.policy.unsettled[episode]
            elif fate is True:
                self._tell(stall.target, stall.key, self._removed(stall, verb, "its answer was lost and the pod is "
                                                                  "gone since"))

    def _removed(self, stall: _Acting, verb: RemovalAction, note: str) -> Remediation:
        target, key = stall.target, stall.key
        self.policy.resolved(target.uid, key)  # the episode is acted on (a retry's included)
        done = _PAST[verb]
        if self.policy.first_event(target.uid, key, REASON_DELETED):
            self.events.on_pod_and_owner(target, REASON_DELETED, stall.say(done, "", note), action="Delete")
        if self.escalation is not None:
            self.escalation.on_deletion(target.node, target.uid, target.ref, target.tenant)
        return Remediation(done, f"{done} {target.ref} (uid {target.uid})" + (f"; {note}" if note else ""))

    def _defer(self, stall: _Acting, decision: Decision, now: float) -> Remediation:
        """A deferral: its Event, log line and /status say why and when it may proceed, from the one ``decision``,
        counted as :meth:`~DeletionPolicy.held` says; a standby writes nothing: the leader speaks for the stall."""
        target, key, rule, why = stall.target, stall.key, decision.rule, decision.why
        first_episode, first = self.policy.held(target.uid, key, decision, now)
        frees = frees_phrase(decision.frees_in_s, decision.frees_when, self.wall_clock())
        if first:
            self.metrics.deferrals.labels(rule, target.namespace, target.target_name).inc()
        if first and rule != "not_leader" and self.policy.first_event(target.uid, key, f"{REASON_DEFERRED}:{rule}"):
            self.events.on_pod_and_owner(target, REASON_DEFERRED, stall.say("deferred", rule, why, frees))
        detail = f"{target.ref}: {why}" + (f"; {frees}" if frees else "")
        return Remediation("deferred", detail, rule, counted=first_episode)
