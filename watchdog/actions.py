"""The one place that deletes pods and records Events (I/O).

:meth:`Remediator.remediate` is the single choke point for every deletion. In order it:

1. asks the pure :class:`~watchdog.policy.DeletionPolicy` (dry-run, one decision per stall episode);
2. in dry-run, records ``StalledPodDryRun`` Events and stops;
3. GETs the pod afresh (never the cache) and aborts if it is gone or changed: UID, IP, phase, terminating;
4. re-scrapes the engine once and aborts if the series is unknown now (running or every progress counter
   missing or not a finite non-negative number, as the detector reads it), went idle (with ``countWaiting``,
   waiting requests count as busy), or any counter moved;
5. deletes with ``preconditions.uid`` (a pod re-created under the same name is never hit) and the pod's own
   grace period unless configured; 404 and 409 mean nothing to do; other API errors are not retried (the next
   cycle decides again from a fresh GET);
6. records ``StalledPodDeleted`` Events on the pod and on its top controller owner.

Events are best effort: a failure is logged and counted, never raised, and never blocks the delete.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from watchdog.detector import PROGRESS_COUNTERS, Verdict
from watchdog.discovery import OwnerRef, ScrapeTarget, controller_of
from watchdog.kube import KubeClient, KubeError
from watchdog.metrics import Metrics
from watchdog.parsing import EngineSnapshot
from watchdog.policy import REASON_DELETED, REASON_DRY_RUN, DeletionPolicy

COMPONENT = "vllm-stall-watchdog"
MAX_MESSAGE = 1024
MAX_OWNER_DEPTH = 5
log = logging.getLogger("watchdog.actions")

Result = Literal["deleted", "dry_run", "not_found", "conflict", "aborted", "error", "skip"]
#: Re-scrape one engine series of a target now; returns its snapshot or None when unknown (never raises).
Rescrape = Callable[[ScrapeTarget, str], EngineSnapshot | None]


@dataclass(frozen=True)
class Remediation:
    """What one remediation did: ``result`` and a one-line ``detail``."""

    result: Result
    detail: str


def _known(value: float | None) -> float | None:
    """``value`` as the detector reads it: None unless a finite, non-negative number."""
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def unknown(now: EngineSnapshot) -> str | None:
    """Why ``now`` gives no evidence (the detector's ``unknown``), or None when it does."""
    if _known(now.running) is None:
        return "running missing"
    if all(_known(getattr(now, name)) is None for name in PROGRESS_COUNTERS):
        return "every progress counter missing"
    return None


def progressed(before: EngineSnapshot, now: EngineSnapshot, count_waiting: bool = False) -> str | None:
    """Why ``now`` shows the engine is no longer stalled compared to ``before``, or None if still frozen.
    ``count_waiting``: waiting requests keep the engine busy (as in the detector)."""
    running, waiting = _known(now.running), (_known(now.waiting) or 0.0) if count_waiting else 0.0
    if running is not None and running + waiting <= 0:
        return "engine went idle"
    for name in PROGRESS_COUNTERS:
        a, b = getattr(before, name), getattr(now, name)
        if a is not None and b is not None and a != b:
            return f"{name} moved from {a:g} to {b:g}"
    return None


class Remediator:
    """Deletes stalled pods through :meth:`remediate` only. ``grace_period_s`` None keeps the pod's own;
    ``count_waiting``: the detector's setting, so the re-scrape judges idleness the same way."""

    def __init__(self, kube: KubeClient, policy: DeletionPolicy, rescrape: Rescrape, metrics: Metrics,
                 grace_period_s: int | None = None, count_waiting: bool = False) -> None:
        self.kube, self.policy, self.rescrape, self.metrics = kube, policy, rescrape, metrics
        self.grace_period_s, self.count_waiting = grace_period_s, count_waiting
        self.instance = socket.gethostname()

    def remediate(self, target: ScrapeTarget, series: EngineSnapshot, verdict: Verdict, window_s: float) -> Remediation:
        """Act on a stalled engine ``series`` of ``target`` (the snapshot the verdict was made on)."""
        decision = self.policy.decide(target.uid, series.key, target.mode)
        if decision.action == "skip":
            return Remediation("skip", decision.why)
        evidence = (f"engine series {{{series.key}}} of pod {target.ref}: {verdict.reason}; window {window_s:g} s")
        if decision.action == "dry_run":
            self.policy.record(target.uid, series.key)
            self._events(target, REASON_DRY_RUN, f"DRY-RUN, would delete ({decision.why}): {evidence}")
            return self._done("dry_run", f"would delete {target.ref}: {decision.why}")

        changed = self._changed(target)
        if changed:
            return self._done("aborted", f"pod {target.ref} changed since the decision: {changed}")
        now = self.rescrape(target, series.key)
        missing = "no series" if now is None else unknown(now)
        if now is None or missing:
            return self._done("aborted", f"re-scrape of {target.url} gave no evidence ({missing}); "
                              "retrying next cycle")
        moved = progressed(series, now, self.count_waiting)
        if moved:
            return self._done("aborted", f"engine recovered before deletion: {moved}")

        try:
            result = self.kube.delete_pod(target.namespace, target.name, target.uid, self.grace_period_s)
        except KubeError as exc:
            return self._done("error", f"delete {target.ref} failed, not retried: {exc}")
        if result != "deleted":
            why = "already gone" if result == "not_found" else "UID precondition failed: the name is a new pod"
            return self._done(result, f"nothing deleted for {target.ref}: {why}")
        self.policy.record(target.uid, series.key)
        self._events(target, REASON_DELETED, f"deleted: {evidence}")
        return self._done("deleted", f"deleted {target.ref} (uid {target.uid})")

    def _done(self, result: Result, detail: str) -> Remediation:
        self.metrics.deletions.labels(result).inc()
        log.log(logging.WARNING if result in ("deleted", "dry_run", "error") else logging.INFO,
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

    def _top_owner(self, target: ScrapeTarget) -> OwnerRef | None:
        """Walk controller owner references up (ReplicaSet -> Deployment, ...); stop where a GET fails."""
        ref = target.owner
        for _ in range(MAX_OWNER_DEPTH):
            if ref is None:
                return None
            try:
                obj = self.kube.get_object(ref.api_version, ref.kind, target.namespace, ref.name)
            except KubeError as exc:
                log.info("owner chain stops at %s/%s: %s", ref.kind, ref.name, exc)
                return ref
            parent = controller_of((obj or {}).get("metadata") or {})
            if parent is None:
                return ref
            ref = parent
        return ref

    def _events(self, target: ScrapeTarget, reason: str, message: str) -> None:
        involved = [{"apiVersion": "v1", "kind": "Pod", "name": target.name, "uid": target.uid}]
        try:
            owner = self._top_owner(target)
        except Exception:  # best effort: never let the owner walk break the cycle
            log.exception("owner chain walk failed for %s", target.ref)
            owner = None
        if owner is not None:
            involved.append({"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name,
                             "uid": owner.uid})
        for obj in involved:
            body = event_body(target.namespace, obj, reason, message, self.instance)
            try:
                self.kube.create_event(target.namespace, body)
            except Exception as exc:  # best effort by design
                self.metrics.event_failures.inc()
                log.warning("could not record %s Event on %s %s/%s: %s", reason, obj["kind"], target.namespace,
                            obj["name"], exc)


def event_body(namespace: str, involved: dict[str, str], reason: str, message: str, instance: str,
               now: dt.datetime | None = None) -> dict[str, Any]:
    """A core/v1 Event (type Warning) on ``involved`` ({apiVersion, kind, name, uid}); message cut to 1 KiB."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message.encode()) > MAX_MESSAGE:
        message = message.encode()[: MAX_MESSAGE - 3].decode("utf-8", "ignore") + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": {**involved, "namespace": namespace},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "action": "Delete" if reason == REASON_DELETED else "None",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
