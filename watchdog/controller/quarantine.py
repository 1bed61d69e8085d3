"""Quarantine through the readiness gate (I/O): writes the gate condition the pure rule
(:mod:`watchdog.core.quarantine`) asks for, one ``pods/status`` patch per change through the actuator, the pod's UID
as its precondition (404 and 409: gone or replaced, not an error).

Once per cycle: :meth:`Quarantine.observe` reads the gate's view of the pod LIST, then :meth:`Quarantine.run` walks
the judged pods. Only the leader writes (a standby forgets what it wrote: the next leader starts from the LIST). A
drain whose answer was lost counts in this cycle's owner share and last-Ready rail (fail closed); the next LIST says
what happened. What is counted, logged and told in Events: docs/safety.md "Quarantine through a readiness gate".
Nothing here removes a pod.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from watchdog.adapters.events import EventRecorder
from watchdog.adapters.logs import facts
from watchdog.adapters.metrics import Metrics
from watchdog.controller.actuator import Actuator, GateChange
from watchdog.controller.ports import Clock
from watchdog.controller.state import PodRecord
from watchdog.core.events import REASON_QUARANTINED, REASON_RELEASED, engine_phrase, escape_controls, utc_stamp
from watchdog.core.model import WatchedPod
from watchdog.core.policy import CycleFacts, DeletionPolicy
from watchdog.core.quarantine import (
    GATE_CONDITION,
    Fleet,
    OwnerShare,
    QuarantineRails,
    change_for,
    drain_hold,
    gate_condition,
    read_fleet,
    wanted,
)
from watchdog.core.vocab import QuarantineChange, WriteOutcome

log = logging.getLogger("watchdog.controller.quarantine")


def _evidence(pod: PodRecord) -> str:
    """The worst engine series of ``pod`` in one phrase (stalled before suspect, then the longest stall); its
    key is pod-controlled: escaped (the condition message, the Event and the log carry it)."""
    known = [(key, e.verdict) for key, e in sorted(pod.engines.items()) if e.verdict is not None]
    if not known:
        return "no engine series known"
    key, v = max(known, key=lambda kv: (kv[1].state == "stalled", kv[1].stalled_for_s))
    running = "unknown" if v.running is None else f"{v.running:g}"
    engine = escape_controls(engine_phrase(key).strip() or "engine")
    return f"{engine} {v.state}: no progress for {v.stalled_for_s:.0f} s, {running} requests running"


class Quarantine:
    """The readiness gate writer; inert (``enabled`` False) unless the setting ``quarantine`` is on."""

    def __init__(self, actuator: Actuator, metrics: Metrics, events: EventRecorder, rails: QuarantineRails, *,
                 enabled: bool, clock: Clock, wall_clock: Clock) -> None:
        self.actuator, self.metrics, self.events, self.rails = actuator, metrics, events, rails
        self.enabled, self.clock, self.wall_clock = enabled, clock, wall_clock
        self.fleet = Fleet({}, {}, {})
        self.written: dict[str, str] = {}  # pod UID -> gate status this replica last wrote while leader
        self._held: set[tuple[str, str]] = set()  # (pod UID, rule) already logged and counted

    def observe(self, pods_by_target: Iterable[tuple[Any, Iterable[Mapping[str, Any]]]]) -> None:
        """This cycle's pod LIST, before it is dropped."""
        if self.enabled:
            self.fleet = read_fleet(p for _, pods in pods_by_target for p in pods)

    def current(self, uid: str) -> str | None:
        """The gate's status as this replica knows it: what it wrote, else what the LIST showed."""
        pod = self.fleet.gated.get(uid)
        return self.written.get(uid, pod.condition if pod is not None else None)

    def run(self, judged: Sequence[tuple[WatchedPod, PodRecord]], policy: DeletionPolicy, facts: CycleFacts) -> None:
        """Move each judged gated pod's condition towards what its engines ask for. ``facts``: the cycle's (whether
        this replica holds the Lease this cycle)."""
        if not self.enabled:
            return
        if not facts.leader:  # a standby writes nothing; once leader again it starts from the LIST, not its memory
            self.written.clear()
            self.metrics.set_per_workload(self.metrics.quarantined, {})
            return
        self.written = {uid: s for uid, s in self.written.items() if uid in self.fleet.gated}
        self._held = {k for k in self._held if k[0] in self.fleet.gated}
        now = self.clock()
        drained = {uid: p.owner_key for uid, p in self.fleet.gated.items() if self.current(uid) == "False"}
        share = OwnerShare(self.fleet, self.rails.quarantine_max_owner_fraction, drained)
        for target, pod in sorted(judged, key=lambda j: j[0].ref):
            gated = self.fleet.gated.get(target.uid)
            if gated is None:
                continue
            change = change_for(wanted(pod.gate_states(), self.rails.quarantine_after_seconds),
                                self.current(target.uid))
            if change == "quarantined":
                hold = drain_hold(self.rails, namespace_mode=target.mode, paused_by=policy.paused_by,
                                  breaker_open=policy.breaker_open(now),
                                  namespace_breaker_open=policy.namespace_breaker_open(target.namespace, now))
                hold = hold or share.hold(gated.owner_key, gated.ready)
                if hold is not None:
                    self._hold(target, hold.rule, hold.why)
                    continue
            if change is None:
                continue
            outcome = self._write(target, change, _evidence(pod))
            if outcome == "fenced":  # lost the Lease mid-cycle: write nothing more
                break
            if change == "quarantined" and outcome in ("done", "lost"):  # a lost drain counts (fail closed)
                share.drain(gated.owner_key, gated.ready)
        drained_now = Counter((t.namespace, t.target_name) for t, _ in judged if t.uid in self.fleet.gated
                              and self.current(t.uid) == "False")
        self.metrics.set_per_workload(self.metrics.quarantined, drained_now)

    def _hold(self, target: WatchedPod, rule: str, why: str) -> None:
        if (target.uid, rule) in self._held:
            return
        self._held.add((target.uid, rule))
        self.metrics.quarantine_held.labels(rule, target.namespace, target.target_name).inc()
        log.info("quarantine of %s held back: %s", target.ref, why, extra=facts(target, rule=rule, reason=why))

    def _write(self, target: WatchedPod, change: QuarantineChange, evidence: str) -> WriteOutcome:
        """Patch the gate through the actuator and say it; what it came to (a pod gone or replaced: not an error)."""
        drain = change == "quarantined"
        message = (f"Quarantined by vllm-stall-watchdog: {evidence}" if drain else
                   f"Engine idle or progressing ({evidence})")
        condition = gate_condition(change, message, utc_stamp(dt.datetime.fromtimestamp(self.wall_clock(), dt.UTC)))
        applied = self.actuator.apply(GateChange(target, condition))
        if applied.outcome in ("lost", "refused"):
            log.warning("could not set %s=%s on %s: %s%s", GATE_CONDITION, condition["status"], target.ref,
                        applied.error, "; the answer was lost: the next LIST shows what happened" if applied.outcome
                        == "lost" else "", extra=facts(target, result="error", reason=applied.error))
            return applied.outcome
        if applied.outcome in ("not_found", "conflict"):  # fenced: the actuator said so
            log.info("pod %s is gone or replaced (%s): readiness gate not written", target.ref, applied.outcome,
                     extra=facts(target, result=applied.outcome))
        if applied.outcome != "done":
            return applied.outcome
        self.written[target.uid] = condition["status"]
        self.metrics.quarantine_changes.labels(change, target.namespace, target.target_name).inc()
        log.log(logging.INFO if change == "admitted" else logging.WARNING, "readiness gate of %s %s: %s=%s (%s)",
                target.ref, change, GATE_CONDITION, condition["status"], evidence,
                extra=facts(target, result=change, reason=evidence))
        if change != "admitted":
            what = "taken out of its Services' endpoints" if drain else "back in its Services' endpoints"
            self.events.on_pod_and_owner(target, REASON_QUARANTINED if drain else REASON_RELEASED, f"Pod {target.ref} "
                                         f"{what}: readiness gate {GATE_CONDITION}={condition['status']}; {evidence}.")
        self._held = {k for k in self._held if k[0] != target.uid}
        return applied.outcome
