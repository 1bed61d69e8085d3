"""The evidence kept before a deletion (I/O): reads the engine container's log tail (opt-in, bounded in lines,
bytes and time) and writes one WARNING log line whose ``evidence`` field holds the record built by
:func:`watchdog.core.evidence.build_record`. Never raises and never holds the deletion back beyond one API
request's timeout: a log that cannot be read is recorded as ``log unavailable: <why>``."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from watchdog.adapters.logs import facts
from watchdog.controller.actuator import Actuator
from watchdog.controller.ports import Clock
from watchdog.core.detector import Verdict
from watchdog.core.evidence import HistoryEntry, build_record, evidence_id, log_tail, snapshot_values
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.profiles import Selector

log = logging.getLogger("watchdog.controller.evidence")


class EvidenceKeeper:
    """Writes the evidence of one deletion (or dry-run decision). ``actuator``: where the log tail is read (the
    read that sits between a decision and its write); ``log_lines`` 0: no log read (no pods/log request at all);
    ``log_bytes``: the cap of the tail kept; clocks as the remediator's."""

    def __init__(self, actuator: Actuator, *, log_lines: int, log_bytes: int, clock: Clock = time.monotonic,
                 wall_clock: Clock = time.time) -> None:
        self.actuator, self.log_lines, self.log_bytes = actuator, log_lines, log_bytes
        self.clock, self.wall_clock = clock, wall_clock

    def keep(self, target: WatchedPod, verdict: Verdict, history: Iterable[HistoryEntry], *, outcome: str,
             final: EngineSnapshot | None, final_from: str, engine: str, signals: tuple[Selector, ...],
             window_source: str = "global") -> str:
        """Log the evidence of ``outcome`` (delete, evict, dry_run) on ``target``'s ``engine`` series; return its
        id, "" when it could not be written (logged; the deletion goes on). ``window_source``: where the verdict's
        window came from (global, target, annotation)."""
        now, wall = self.clock(), self.wall_clock()
        eid = evidence_id(target.uid, wall)
        try:
            text, cut = self._log_tail(target)
            record = build_record(eid, pod=target.ref, uid=target.uid, engine=engine, outcome=outcome, verdict=verdict,
                                  history=history, final=snapshot_values(final, signals), final_from=final_from,
                                  log=text, log_cut=cut, now=now, wall_now=wall, window_source=window_source)
            log.warning("evidence for %s uid %s: id %s", target.ref, target.uid, eid,
                        extra={**facts(target, engine=engine, result=outcome), "evidence": record})
        except Exception:  # the evidence never stops a deletion
            log.exception("evidence for %s could not be written", target.ref, extra=facts(target, engine=engine))
            return ""
        return eid

    def _log_tail(self, target: WatchedPod) -> tuple[str, bool]:
        if self.log_lines <= 0:
            return "log not kept (evidenceLogLines is 0)", False
        try:
            raw = self.actuator.read_log(target.namespace, target.name, target.container, self.log_lines,
                                         self.log_bytes + 1)  # one byte more: the record can tell a cut
        except Exception as exc:  # KubeError: 403 without the RBAC, no kubelet, a timeout; anything else alike
            return f"log unavailable: {exc}", False
        return log_tail(raw, self.log_bytes)
