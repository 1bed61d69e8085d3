"""The one place that deletes pods (I/O).

:meth:`Remediator.remediate` is the single choke point for every deletion. In order it:

1. asks the pure :class:`~watchdog.core.policy.DeletionPolicy`: one decision per stall episode, dry-run, pause,
   leadership, warm-up, minimum pod age, the mass-stall breaker and the deletion budgets. A deferral gets one
   ``StalledPodDeletionDeferred`` Event per episode and rule, a metric, and is retried next cycle;
2. in dry-run, records ``StalledPodDryRun`` Events and stops;
3. GETs the pod afresh (never the cache) and aborts if it is gone or changed: UID, IP, phase, terminating;
4. re-scrapes the engine once and aborts unless :func:`watchdog.core.confirm.not_confirmed` (the detector's own
   reading of evidence, busy and progress) confirms the stall: unknown now, idle now, or a counter moved;
5. checks leadership once more, then deletes (or, with ``action: evict``, evicts through the Eviction API so
   PodDisruptionBudgets hold; a 429 is a deferral, never turned into a delete) with ``preconditions.uid`` (a
   pod re-created under the same name is never hit) and the pod's own grace period unless configured; 404 and
   409 mean nothing to do; other API errors are not retried (the next cycle decides again from a fresh GET);
6. charges the budgets, records ``StalledPodDeleted`` Events on the pod and its top controller owner, and tells
   the node escalation (if enabled) which node the pod ran on.

Events are best effort (:mod:`watchdog.adapters.events`): a failure is logged and counted, never raised, and never
blocks the delete.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.adapters.events import EventRecorder
from watchdog.adapters.kube import KubeError
from watchdog.adapters.metrics import Metrics
from watchdog.controller.ports import Clock, Escalation, KubeApi
from watchdog.core.confirm import not_confirmed
from watchdog.core.detector import Verdict
from watchdog.core.events import REASON_DEFERRED, REASON_DELETED, REASON_DRY_RUN
from watchdog.core.model import ScrapeTarget
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.policy import DeletionPolicy
from watchdog.core.vocab import RemediationResult

log = logging.getLogger("watchdog.controller.remediator")

Result = RemediationResult
#: Re-scrape one engine series of a target now; returns its snapshot or None when unknown (never raises).
Rescrape = Callable[[ScrapeTarget, str], EngineSnapshot | None]


@dataclass(frozen=True)
class Remediation:
    """What one remediation did: ``result`` and a one-line ``detail``."""

    result: Result
    detail: str


def pod_age_s(target: ScrapeTarget, wall_now: float, seen_for_s: float = 0.0) -> float | None:
    """Seconds since ``metadata.creationTimestamp`` (wall clock, as the API reports it), but never less than
    ``seen_for_s`` (how long this process has watched the pod, monotonic), so a wall clock jumping back cannot
    hold a wedged pod for hours. None when the timestamp is unknown and the pod was never seen before."""
    try:
        created = dt.datetime.strptime(target.created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return seen_for_s or None
    return max(wall_now - created.timestamp(), seen_for_s)


class Remediator:
    """Deletes stalled pods through :meth:`remediate` only.

    ``grace_period_s`` None keeps the pod's own; ``count_waiting``: the detector's setting, so the re-scrape
    judges idleness the same way; ``action``: delete | evict; ``leader``: returns whether this replica holds
    the lease (always True without leader election); ``clock``: monotonic seconds; ``wall_clock``: Unix
    seconds (pod age only); ``escalation``: node escalation or None.
    """

    def __init__(self, kube: KubeApi, policy: DeletionPolicy, rescrape: Rescrape, metrics: Metrics, *,
                 grace_period_s: int | None = None, count_waiting: bool = False, action: str = "delete",
                 leader: Callable[[], bool] = lambda: True, clock: Clock = time.monotonic,
                 wall_clock: Clock = time.time, escalation: Escalation | None = None,
                 events: EventRecorder | None = None) -> None:
        self.kube, self.policy, self.rescrape, self.metrics = kube, policy, rescrape, metrics
        self.grace_period_s, self.count_waiting, self.action = grace_period_s, count_waiting, action
        self.leader, self.clock, self.wall_clock, self.escalation = leader, clock, wall_clock, escalation
        self.events = events or EventRecorder(kube, metrics)

    def remediate(self, target: ScrapeTarget, series: EngineSnapshot, verdict: Verdict, window_s: float, *,
                  seen_for_s: float = 0.0) -> Remediation:
        """Act on a stalled engine ``series`` of ``target`` (the snapshot the verdict was made on).
        ``seen_for_s``: seconds (monotonic) this process has watched the pod."""
        now = self.clock()
        age = pod_age_s(target, self.wall_clock(), seen_for_s)
        decision = self.policy.decide(
            uid=target.uid, series=series.key, namespace=target.namespace, namespace_mode=target.mode,
            owner=target.owner_key, pod_age_s=age, now=now, leader=self.leader())
        if decision.action == "skip":
            return Remediation("skip", decision.why)
        evidence = (f"engine series {{{series.key}}} of pod {target.ref}: {verdict.reason}; window {window_s:g} s")
        if decision.action == "dry_run":
            self.policy.record(target.uid, series.key)
            self.events.on_pod_and_owner(target, REASON_DRY_RUN, f"DRY-RUN, would delete ({decision.why}): {evidence}")
            return self._done("dry_run", f"would delete {target.ref}: {decision.why}")
        if decision.action == "defer":
            return self._defer(target, series.key, decision.rule, decision.why, evidence)

        changed = self._changed(target)
        if changed:
            return self._done("aborted", f"pod {target.ref} changed since the decision: {changed}")
        fresh = self.rescrape(target, series.key)
        if fresh is None:
            return self._done("aborted", f"re-scrape of {target.url} gave no evidence (no series); retrying next cycle")
        why = not_confirmed(series, fresh, self.count_waiting)
        if why is not None and why.startswith("no evidence"):
            return self._done("aborted", f"re-scrape of {target.url} gave {why}; retrying next cycle")
        if why is not None:
            return self._done("aborted", f"engine recovered before deletion: {why}")
        if not self.leader():
            return self._defer(target, series.key, "not_leader", "lost the leader Lease before acting", evidence)
        return self._remove(target, series.key, evidence, now)

    def _remove(self, target: ScrapeTarget, key: str, evidence: str, now: float) -> Remediation:
        verb = "evict" if self.action == "evict" else "delete"
        try:
            if verb == "evict":
                result: str = self.kube.evict_pod(target.namespace, target.name, target.uid, self.grace_period_s)
            else:
                result = self.kube.delete_pod(target.namespace, target.name, target.uid, self.grace_period_s)
        except KubeError as exc:
            return self._done("error", f"{verb} {target.ref} failed, not retried: {exc}")
        if result == "blocked":
            return self._defer(target, key, "pdb", "the Eviction API refused (a PodDisruptionBudget would be "
                               "violated); never falling back to delete", evidence)
        if result not in ("deleted", "evicted"):
            why = "already gone" if result == "not_found" else "UID precondition failed: the name is a new pod"
            return self._done("not_found" if result == "not_found" else "conflict",
                              f"nothing {verb}d for {target.ref}: {why}")
        self.policy.record_deletion(now, uid=target.uid, series=key, namespace=target.namespace,
                                    owner=target.owner_key)
        self.events.on_pod_and_owner(target, REASON_DELETED, f"{verb}d: {evidence}", action="Delete")
        if self.escalation is not None:
            self.escalation.on_deletion(target.node, target.uid, target.ref)
        return self._done("evicted" if verb == "evict" else "deleted", f"{verb}d {target.ref} (uid {target.uid})")

    def _defer(self, target: ScrapeTarget, key: str, rule: str, why: str, evidence: str) -> Remediation:
        self.metrics.deferrals.labels(rule).inc()
        # A standby replica writes nothing to the cluster: the leader speaks for the stall.
        if rule != "not_leader" and self.policy.first_deferral(target.uid, key, rule):
            self.events.on_pod_and_owner(target, REASON_DEFERRED, f"deletion deferred ({why}): {evidence}")
        return self._done("deferred", f"{target.ref}: {why}")

    def _done(self, result: Result, detail: str) -> Remediation:
        self.metrics.deletions.labels(result).inc()
        log.log(logging.WARNING if result in ("deleted", "evicted", "dry_run", "error") else logging.INFO,
                "remediation %s: %s", result, detail, extra={"result": result})
        return Remediation(result, detail)

    def _changed(self, target: ScrapeTarget) -> str | None:
        try:
            pod = self.kube.get_pod(target.namespace, target.name)
        except KubeError as exc:
            return f"fresh GET failed ({exc})"
        if pod is None:
            return "pod is gone"
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("uid") != target.uid:
            return f"UID is now {meta.get('uid')} (a new pod under the same name)"
        if meta.get("deletionTimestamp"):
            return "pod is terminating"
        if status.get("phase") != "Running":
            return f"phase is {status.get('phase')}"
        if status.get("podIP") != target.ip:
            return f"pod IP is now {status.get('podIP')}"
        return None
