"""What the cycle remembers between cycles: one :class:`PodRecord` per pod UID (restart count, when this
process first watched it, how long its last scrape took, and one :class:`EngineRecord` per engine series).

Bounds: records exist only for pods discovered this cycle (the rest are dropped); a series that stopped being
exported is dropped after one window without it (``drop_vanished``), and a pod never keeps more than
:data:`MAX_SERIES_PER_POD` series (the newest win; the rest are dropped and counted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from watchdog.adapters.logs import facts
from watchdog.controller.reading import Reading
from watchdog.core.detector import DetectorState, Sample, Verdict
from watchdog.core.evidence import HistoryEntry, remember
from watchdog.core.lines import Labels
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import LIMITS, EngineSnapshot, ParseResult
from watchdog.core.podpolicy import EffectivePolicy

log = logging.getLogger(__name__)

MAX_SERIES_PER_POD = LIMITS.series  # the same cap as per scrape body (one rule, core/parsing.py)


@dataclass(slots=True)
class EngineRecord:
    """The detector, latest snapshot and verdict of one engine series. ``last_seen``: monotonic time the series was last
    in a successfully parsed body; ``history``: the samples of the current suspect/stalled episode (the evidence kept
    before a deletion), None outside one (a healthy series holds none); ``fed_at``: the time of the last sample fed
    from its own stamp (source prometheus), which is never fed again; ``held``: the last reading had no newer sample
    of it, so its verdict stands on older data (nothing acts on a held verdict: a target that stopped delivering
    without a staleness marker keeps answering its last sample, and a confirmation would only read that again)."""

    detector: DetectorState
    last_seen: float
    fed_at: float | None = None
    held: bool = False
    last: EngineSnapshot | None = None
    verdict: Verdict | None = None
    history: tuple[HistoryEntry, ...] | None = None


class Observation(NamedTuple):
    """One engine series' verdict after one scrape: ``previous`` state (None when new), ``present`` in the body
    (a named tuple: one per engine series and cycle, made ~4x faster than a frozen dataclass)."""

    key: str
    engine: EngineRecord
    verdict: Verdict
    previous: str | None
    present: bool


@dataclass
class PodRecord:
    """One pod UID: the restart count the engine states belong to, when this process first watched it
    (monotonic), its last scrape's duration (slowest pods are scraped first), outcome and time, and its engine
    series."""

    restart_count: int
    first_seen: float
    scrape_seconds: float = 0.0
    engines: dict[str, EngineRecord] = field(default_factory=dict)
    outcome: str = ""  # the last scrape's outcome ("" before the first), for logs and /status
    outcome_since: float = 0.0  # monotonic time the scrape outcome last changed between ok and failing
    scraped_at: float | None = None  # monotonic time the last reading was taken in (its sample time: Reading.t)
    scrape_detail: str = ""  # why the last scrape failed, one line ("" when it worked)
    mark: float | None = None  # the source's own mark (Reading.mark; Prometheus: the newest sample time fed)
    timeouts: int = 0  # scrapes in a row that timed out (0 after any other outcome)
    policy: EffectivePolicy | None = None  # the pod's effective stall policy its detectors were built with
    paused_by: str = ""  # why its pause annotation holds its engines paused this cycle ("": it does not)
    confirmed: set[str] = field(default_factory=set)  # stalled series a direct read confirmed (source prometheus)
    direct: bool = True  # its engine series were read from the pod itself (source scrape), not from Prometheus

    def stall_confirmed(self, confirm: Callable[[dict[str, EngineRecord]], set[str]]) -> bool:
        """Whether a stalled engine series of this pod was confirmed by a direct read in its stall episode: one
        confirmed before that is still stalled, else one ``confirm`` (given the stalled series) confirms now."""
        stalled = {k: e for k, e in self.engines.items() if e.verdict is not None and e.verdict.state == "stalled"}
        self.confirmed &= stalled.keys()
        if stalled and not self.confirmed:
            self.confirmed = confirm(stalled) & stalled.keys()
        return bool(self.confirmed)

    def stalled_for(self) -> float:
        """Seconds its longest-stalled engine series has been stalled (0.0: none is)."""
        return max((e.verdict.stalled_for_s for e in self.engines.values()
                    if e.verdict is not None and e.verdict.state == "stalled"), default=0.0)

    def gate_states(self) -> list[tuple[str, float]]:
        """(state, seconds suspect or stalled) of each judged engine series, for the readiness gate. Read from
        Prometheus (not ``direct``), a stall is evidence only once a direct read confirmed it
        (:meth:`stall_confirmed`) and a suspicion never: a series there can carry any pod's labels, so a forged one
        would drain another tenant's pod from its Service. Unconfirmed, it reads unknown (the gate holds)."""
        return [("unknown" if not self.direct and e.verdict.state in ("stalled", "suspect") and key not in
                 self.confirmed else e.verdict.state, e.verdict.stalled_for_s)
                for key, e in self.engines.items() if e.verdict is not None]

    def take(self, target: WatchedPod, reading: Reading, now: float, *, direct: bool = True) -> None:
        """Take this cycle's ``reading`` of ``target`` (this record's pod) in at ``now`` (``direct``: read from the
        pod itself, not from Prometheus); log its first failed reading (also before any engine series is known)
        and its recovery, once each, with the reason."""
        self.direct = direct
        outcome, was = reading.outcome, self.outcome
        if reading.seconds is not None:
            self.scrape_seconds = reading.seconds
        if reading.mark is not None:
            self.mark = reading.mark
        self.timeouts = self.timeouts + 1 if outcome == "timeout" else 0
        failing, was_failing = outcome != "ok", was not in ("ok", "")
        if failing and reading.detail:
            self.scrape_detail = reading.detail
        if failing and not was_failing:
            what = reading.what or f"scrape of {target.url}"
            log.info("pod %s: %s failed (%s: %s): its engines are unknown until it answers", target.ref, what,
                     outcome, self.scrape_detail or outcome,
                     extra=facts(target, state="unknown", result=outcome, reason=self.scrape_detail or outcome))
        elif was_failing and not failing:
            log.info("pod %s: scrape works again after %.0f s of failures (last: %s: %s)", target.ref,
                     now - self.outcome_since, was, self.scrape_detail or was,
                     extra=facts(target, result="ok", reason=f"recovered from {was}"))
        if failing != was_failing or not was:
            self.outcome_since = now
        if not failing:
            self.scrape_detail = ""
        self.outcome, self.scraped_at = outcome, now

    def use_policy(self, policy: EffectivePolicy) -> None:
        """The effective policy the pod's detectors are built with (a changed one needs a new record)."""
        self.policy = policy

    def observe(self, t: float, parsed: ParseResult | None, window_s: float,
                new_detector: Callable[[], DetectorState], stamps: Mapping[Labels, float | None] | None = None,
                hold_s: float | None = None, paused_by: str = "") -> tuple[list[str], list[Observation]]:
        """Feed one scrape (``parsed``; None when it failed) to every engine series' detector at time ``t``.

        The one path from a scrape to verdicts, shared by ``run`` and ``replay --expositions``: series absent
        from successful scrapes for a window are forgotten first (their keys are returned); every series in
        the body or remembered gets a sample (an unknown one when absent), in key order. ``stamps`` (source
        prometheus): a series in the body is fed at its own time there instead, and only when that time is later
        than the one it was last fed at; otherwise, or when its stamp is None (not to be fed this cycle), it is
        held (not fed: a sample seen twice would count as a busy sample without progress) and its verdict stands,
        for at most ``hold_s`` after it was last fed: then, as for a new series without a stamp, it gets an
        unknown sample that says why (never evidence, but visible: a series starved of samples must not keep an
        old verdict silently). ``paused_by`` (why the pod's pause annotation holds, "" when it does not): every
        sample read is paused (detector rule 7: never stalled, and its stall clock starts afresh after the pause),
        its verdict saying why.
        """
        self.paused_by = paused_by
        seen = {s.key: s for s in parsed.series} if parsed is not None else {}
        vanished = self.drop_vanished(t, window_s, seen) if parsed is not None else []
        out: list[Observation] = []
        for key in sorted(set(seen) | set(self.engines)):
            snap = seen.get(key)
            engine = self.engines.get(key)
            own, starved = t, ""
            if snap is not None and stamps is not None:
                stamp = stamps.get(snap.labels, t)
                if stamp is None or (engine is not None and engine.fed_at is not None and stamp <= engine.fed_at):
                    starved = _starved(engine, t, hold_s)
                    if not starved and engine is not None and engine.verdict is not None:
                        engine.held = True
                        out.append(Observation(key, engine, engine.verdict, engine.verdict.state, True))
                        continue
                else:
                    own = stamp
            if engine is None:
                engine = self.engines[key] = EngineRecord(new_detector(), last_seen=own)
            previous = engine.verdict.state if engine.verdict else None
            if snap is not None and not starved:
                engine.fed_at = own if stamps is not None else None
                engine.last_seen, engine.last = own, snap
                sample = Sample(own, snap.running, snap.progress, snap.waiting, 1.0 if paused_by else snap.paused)
            else:
                sample = Sample(t, None)
            engine.held = False
            engine.verdict = engine.detector.observe(sample)
            if starved:
                engine.verdict = replace(engine.verdict, reason=starved)
            elif paused_by and engine.verdict.state == "paused":
                engine.verdict = replace(engine.verdict, reason=f"paused: {paused_by}")
            engine.history = remember(engine.history, sample, engine.verdict, engine.detector.signals)
            out.append(Observation(key, engine, engine.verdict, previous, snap is not None))
        return vanished, out

    def drop_vanished(self, now: float, window_s: float, present: Collection[str]) -> list[str]:
        """Forget series absent from every successful scrape for ``window_s`` or longer (``present``: the keys in
        this scrape's body, never dropped); return their keys."""
        gone = [key for key, e in self.engines.items() if key not in present and now - e.last_seen >= window_s]
        for key in gone:
            del self.engines[key]
        return gone

    def cap_series(self) -> int:
        """Keep at most :data:`MAX_SERIES_PER_POD` series (the most recently seen); return how many were dropped."""
        extra = len(self.engines) - MAX_SERIES_PER_POD
        if extra <= 0:
            return 0
        for key in sorted(self.engines, key=lambda k: self.engines[k].last_seen)[:extra]:
            del self.engines[key]
        return extra


def _starved(engine: EngineRecord | None, t: float, hold_s: float | None) -> str:
    """Why an engine series without a newer sample at ``t`` gets an unknown sample instead of being held, or "":
    it is new (nothing to hold), or it was last fed more than ``hold_s`` before ``t``."""
    if engine is None or engine.verdict is None or engine.fed_at is None:
        return "no evidence: its samples changed while Prometheus was read (fed when they hold still)"
    if hold_s is not None and t - engine.fed_at > hold_s:
        return (f"no evidence: no sample of it fed for {t - engine.fed_at:.0f} s (its samples changed while "
                f"Prometheus was read each time, or stopped)")
    return ""
