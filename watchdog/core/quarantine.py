"""Quarantine through a readiness gate: what a gated pod's condition should be. Pure: no I/O, no clock.

A workload opts in per pod template with ``spec.readinessGates: [{conditionType: GATE_CONDITION}]``; the kubelet
then reports the pod Ready only while that condition is True, and the Service's endpoints follow Ready. The
watchdog (setting ``quarantine``) maintains the condition on the gated pods it watches:

- *admit* (condition absent -> True) as soon as the pod is discovered and every engine series is idle, paused or
  progressing: a gated pod is discovered once its containers are ready (``ContainersReady``), before it is Ready;
- *drain* (-> False) when an engine series is stalled, or suspect for at least ``quarantine_after_seconds``;
- *release* (False -> True) when every engine series is idle, paused or progressing again.

Unknown (a failed scrape, no usable series) is never evidence: it neither drains nor releases (the condition
stays as it is), nor does a suspect series younger than ``quarantine_after_seconds`` nor a mixed pod.

Rails, in this order, for draining only (admitting and releasing are always allowed; writing at all needs the
leader Lease, which the controller checks): dry-run (the global ``dryRun`` or a dry-run namespace) unless
``quarantine_in_dry_run``; the pause (setting or run-time brake); the fleet or namespace breaker; the owner share
(never more than ``quarantine_max_owner_fraction`` of an owner's pods drained at once, rounded down) and never
the owner's last Ready pod (a pod without a controller owner is its own owner of one: never drained).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from watchdog.core.detector import window_reached
from watchdog.core.discovery import condition, controller_of, has_gate
from watchdog.core.model import GATE_CONDITION, owner_key
from watchdog.core.vocab import SETTLED_STATES, QuarantineChange, QuarantineHold

__all__ = ["GATE_CONDITION", "Fleet", "GatedPod", "Hold", "OwnerShare", "QuarantineRails", "change_for",
           "drain_hold", "gate_condition", "read_fleet", "wanted"]
#: The condition's ``reason`` for each status the watchdog writes.
REASON_PROGRESSING = "EngineProgressing"
REASON_QUARANTINED = "EngineStalled"

Want = Literal["drain", "release", "hold"]


@dataclass(frozen=True)
class GatedPod:
    """One pod that declares the gate, as the pod LIST showed it: ``condition`` is the gate's status ("True",
    "False", or None when absent); ``ready``: its Ready condition is True."""

    uid: str
    owner_key: str | None
    ready: bool
    condition: str | None


@dataclass(frozen=True)
class Fleet:
    """What one pod LIST says about the gate: the gated pods by UID, and per owner key the number of its live
    (not terminating) pods and of those Ready, gated or not."""

    gated: Mapping[str, GatedPod]
    owner_pods: Mapping[str, int]
    owner_ready: Mapping[str, int]


@dataclass(frozen=True)
class QuarantineRails:
    """The settings the rule reads (each field named as its setting; their defaults are the settings', none here)."""

    quarantine_after_seconds: float
    quarantine_max_owner_fraction: float
    quarantine_in_dry_run: bool
    dry_run: bool


@dataclass(frozen=True)
class Hold:
    """Why a wanted drain is held back: ``rule`` (dry_run, paused, breaker, namespace_breaker, owner_share,
    last_ready) and one human phrase."""

    rule: QuarantineHold
    why: str


def read_fleet(pods: Iterable[Mapping[str, Any]]) -> Fleet:
    """The gate's view of a pod LIST (pods listed twice, under two targets, are counted once)."""
    gated: dict[str, GatedPod] = {}
    seen: set[str] = set()
    owner_pods: Counter[str] = Counter()
    owner_ready: Counter[str] = Counter()
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        uid = str(meta.get("uid") or "")
        if not uid or uid in seen or meta.get("deletionTimestamp"):
            continue
        seen.add(uid)
        owner = owner_key(str(meta.get("namespace")), controller_of(meta))  # as WatchedPod.owner_key
        ready = condition(status, "Ready") == "True"
        if owner is not None:
            owner_pods[owner] += 1
            owner_ready[owner] += ready
        if has_gate(pod):
            gated[uid] = GatedPod(uid, owner, ready, condition(status, GATE_CONDITION))
    return Fleet(gated, dict(owner_pods), dict(owner_ready))


def wanted(states: Iterable[tuple[str, float]], after_s: float) -> Want:
    """What the engines of one pod ask for: ``states`` are (detector state, seconds suspect or stalled) per
    engine series. Drain on a stalled series or one suspect for ``after_s`` (with the detector's slack for
    scheduled samples); release when there is at least one series and all are idle, paused or progressing;
    otherwise hold (unknown is never evidence)."""
    seen = list(states)
    if any(s == "stalled" or (s == "suspect" and window_reached(t, after_s)) for s, t in seen):
        return "drain"
    if seen and all(s in SETTLED_STATES for s, _ in seen):
        return "release"
    return "hold"


class OwnerShare:
    """The owner rail over one cycle: drained and Ready counts per owner, updated as pods are drained."""

    def __init__(self, fleet: Fleet, fraction: float, drained: Mapping[str, str | None]) -> None:
        """``drained``: UID -> owner key of every pod whose gate is False now (as last written or listed)."""
        self.fleet, self.fraction = fleet, fraction
        self.drained: Counter[str] = Counter(o for o in drained.values() if o is not None)
        self.ready: Counter[str] = Counter(fleet.owner_ready)
        for uid, owner in drained.items():
            pod = fleet.gated.get(uid)
            if owner is not None and pod is not None and pod.ready:
                self.ready[owner] -= 1  # Ready in a listing older than the drain: not Ready for long

    def hold(self, owner: str | None, ready: bool) -> Hold | None:
        """Why draining a pod of ``owner`` (``ready``: counted Ready now) is not allowed, or None."""
        if owner is None:
            return Hold("last_ready", "the pod has no controller owner: it is its own last pod")
        total = self.fleet.owner_pods.get(owner, 0)
        allowed = int(self.fraction * total)
        if self.drained[owner] + 1 > allowed:
            return Hold("owner_share", f"{owner} has {self.drained[owner]} of its {total} pods drained; at most "
                                       f"{allowed} ({self.fraction:g} of them) may be")
        if self.ready[owner] - int(ready) < 1:
            return Hold("last_ready", f"it is the last Ready pod of {owner}")
        return None

    def drain(self, owner: str | None, ready: bool) -> None:
        if owner is not None:
            self.drained[owner] += 1
            self.ready[owner] -= int(ready)


def drain_hold(rails: QuarantineRails, *, namespace_mode: str, paused_by: str | None, breaker_open: bool,
               namespace_breaker_open: bool) -> Hold | None:
    """The rails before the owner share: why a drain in this namespace is held back now, or None."""
    if (rails.dry_run or namespace_mode != "enforce") and not rails.quarantine_in_dry_run:
        return Hold("dry_run", "dry-run (global or namespace) and quarantineInDryRun is off")
    if paused_by is not None:
        return Hold("paused", f"the watchdog is paused ({paused_by})")
    if breaker_open:
        return Hold("breaker", "the mass-stall breaker is open")
    if namespace_breaker_open:
        return Hold("namespace_breaker", "the namespace's breaker is open")
    return None


def change_for(want: Want, condition: str | None) -> QuarantineChange | None:
    """The write that moves the gate from ``condition`` towards ``want``, or None when nothing is to be done. An
    absent condition is admitted only on good evidence; only an admitted pod (True) is drained: without the
    condition the pod is not Ready anyway."""
    if want == "drain" and condition == "True":
        return "quarantined"
    if want == "release" and condition == "False":
        return "released"
    if want == "release" and condition is None:
        return "admitted"
    return None


def gate_condition(change: QuarantineChange, message: str, stamp: str) -> dict[str, str]:
    """The pod condition (``status.conditions[]`` entry) a change writes, ``stamp`` as lastTransitionTime."""
    drained = change == "quarantined"
    return {"type": GATE_CONDITION, "status": "False" if drained else "True",
            "reason": REASON_QUARANTINED if drained else REASON_PROGRESSING, "message": message[:1024],
            "lastTransitionTime": stamp}
