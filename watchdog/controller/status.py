"""What the watchdog thinks, for ``GET /status`` and ``python -m watchdog status``.

The cycle thread builds a :class:`Snapshot` at the end of each completed cycle (:func:`snapshot`: the immutable
values it needs, captured; the document itself is made by the first answer that asks for it, so a cycle nobody
asks about costs no document) and swaps it in whole; the HTTP thread only reads the reference it finds (never a
structure the cycle is changing) and adds the live facts at answer time (:func:`document`: cycle
started/completed/failed how long ago).

Bounded: at most :data:`MAX_PODS` pods and :data:`MAX_SERIES` engine series are listed, the worst first (stalled,
suspect, unknown, paused, progressing, idle, then namespace and name); what did not fit is counted in
``truncated``. ``namespaces_unreadable`` (namespace-only mode): each watched namespace whose pods could not be
listed in that cycle (their pods are unknown and not in ``pods``): namespace, why, HTTP status, for how long.
The document, per pod: namespace, name, UID, mode, the target judging it and every target whose podSelector
matches it (:func:`watchdog.core.podpolicy.resolve_target`), its worst state, the last scrape (outcome, detail,
age, and for how long it has been failing), its effective policy, ``paused_by`` (why its pause
annotation holds its engines paused, else null); per engine series: the series key and labels, state, how long
suspect or stalled, when last seen, the signal values by name (running, waiting, paused, each progress signal),
how this stall episode was acted on, which rules deferred it and, while one holds it, ``held``: that rule and when
it frees (``frees_in_s`` from the snapshot and ``frees_when``: the policy's Decision). Then the policy's view (budget
left per scope, breakers and why, open deferrals per rule, owners waiting, warm-up, the pause and why), leadership,
and ``targets_conflict``: the pods not judged because targets with different engine profiles match them. Every time
is in seconds, relative: ``*_s`` ages are as of the snapshot, ``snapshot_age_s`` says how old it is.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from watchdog import __version__
from watchdog.controller.nsreads import Unreadable
from watchdog.controller.state import PodRecord
from watchdog.core.detector import Verdict
from watchdog.core.discovery import Overlap
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.podpolicy import EffectivePolicy
from watchdog.core.policy import DeletionPolicy, Episodes
from watchdog.core.profiles import Profile
from watchdog.core.vocab import ENGINE_STATES

MAX_PODS = 2000
MAX_SERIES = 4000
#: Worst first: the order pods and engine series are listed in.
SEVERITY = ("stalled", "suspect", "unknown", "paused", "progressing", "idle")


@dataclass(frozen=True)
class Snapshot:
    """One cycle's view, never changed after it is built. ``taken_at``: monotonic seconds. ``build``: makes the
    document from what the cycle captured (immutable values only), run by the first answer that needs it."""

    taken_at: float
    build: Callable[[], Mapping[str, Any]]

    @cached_property
    def doc(self) -> Mapping[str, Any]:
        """The document (see the module docstring), built once, by the first answer that needs it."""
        return self.build()

    @cached_property
    def body(self) -> bytes:
        """``doc`` as JSON, serialised once, by the first answer that needs it."""
        return json.dumps(self.doc).encode()


@dataclass(frozen=True)
class Liveness:
    """The loop's own times (monotonic seconds) and last error, read at answer time."""

    now: float
    started: float | None
    completed: float | None
    failed: tuple[float, str] | None


def _number(value: object) -> object:
    """JSON has no NaN or infinity: such a value is written as null (unknown)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _rank(state: str) -> int:
    return SEVERITY.index(state) if state in SEVERITY else len(SEVERITY)


#: One engine series as the cycle left it: (key, verdict, latest snapshot, last seen), all immutable.
_Engine = tuple[str, Verdict | None, EngineSnapshot | None, float]


@dataclass(frozen=True, slots=True)
class _Pod:
    """What a snapshot keeps of a pod's record (the record itself changes with the next cycle)."""

    target: WatchedPod
    outcome: str
    detail: str
    scraped_at: float | None
    outcome_since: float
    engines: tuple[_Engine, ...]
    policy: EffectivePolicy | None = None
    paused_by: str = ""

    @classmethod
    def of(cls, target: WatchedPod, record: PodRecord) -> _Pod:
        return cls(target, record.outcome, record.scrape_detail, record.scraped_at, record.outcome_since,
                   tuple((key, e.verdict, e.last, e.last_seen) for key, e in record.engines.items()), record.policy,
                   record.paused_by)


def _engine(uid: str, engine: _Engine, names: tuple[str, ...], episodes: Episodes, now: float) -> dict[str, Any]:
    key, verdict, snap, last_seen = engine
    state = verdict.state if verdict is not None else "unknown"
    acted, deferred_by, held = episodes(uid, key)
    return {
        "engine": key, "labels": dict(snap.labels) if snap else {}, "state": state,
        "for_s": round(verdict.stalled_for_s, 1) if verdict is not None and state in ("suspect", "stalled")
        else None,
        "seen_s_ago": round(now - last_seen, 1),
        "running": _number(snap.running) if snap else None, "waiting": _number(snap.waiting) if snap else None,
        "paused": _number(snap.paused) if snap else None,
        "progress": {name: _number(v) for name, v in zip(names, snap.progress, strict=False)} if snap else {},
        "acted": acted, "deferred_by": deferred_by, "held": held,
    }


def _pod(pod: _Pod, names: tuple[str, ...], episodes: Episodes, now: float) -> dict[str, Any]:
    target = pod.target
    engines = sorted((_engine(target.uid, e, names, episodes, now) for e in pod.engines),
                     key=lambda row: (_rank(row["state"]), row["engine"]))
    failing = pod.outcome not in ("ok", "")
    return {
        "namespace": target.namespace, "pod": target.name, "uid": target.uid, "mode": target.mode,
        "target": target.target_name, "targets": list(target.targets or (target.target_name,)),
        "state": engines[0]["state"] if engines else "unknown",
        "scrape": {"outcome": pod.outcome or None, "detail": pod.detail or None,
                   "age_s": round(now - pod.scraped_at, 1) if pod.scraped_at is not None else None,
                   "failing_for_s": round(now - pod.outcome_since, 1) if failing else None},
        "policy": pod.policy.as_dict() if pod.policy is not None else None,
        "profile": target.profile,  # the engine profile judging it ("policy": its window and where it came from)
        "paused_by": pod.paused_by or None,
        "engines": engines,
    }


def _states(record: PodRecord) -> list[str]:
    """The states of a pod's engine series; ``["unknown"]`` for a pod with none (as vllm_watchdog_engines)."""
    return [e.verdict.state if e.verdict is not None else "unknown" for e in record.engines.values()] or ["unknown"]


def snapshot(targets: Iterable[WatchedPod], pods: Mapping[str, PodRecord], profiles: Mapping[str, Profile],
             policy: DeletionPolicy, *, now: float, leader: bool, clock_skew_s: float | None = None,
             unreadable: Mapping[str, Unreadable] | None = None, conflicts: Sequence[Overlap] = ()) -> Snapshot:
    """The view after a cycle: ``targets`` discovered, their ``pods`` records (a pod deleted this cycle has none
    and is left out), ``now`` monotonic, the watched namespaces whose pods could not be listed (``unreadable``,
    an immutable mapping the cycle replaces whole), the pods not judged because the targets matching them
    conflict (``conflicts``, a list the cycle makes anew). Only the pods listed are written out in full, and only
    when the document is first asked for."""
    watched = [(t, pods[t.uid], _states(pods[t.uid])) for t in targets if t.uid in pods]
    engines = Counter(state for _, _, states in watched for state in states)
    watched.sort(key=lambda w: (min(_rank(s) for s in w[2]), w[0].namespace, w[0].name))
    names = {name: profile.progress_names() for name, profile in profiles.items()}
    kept, series = [], 0
    for t, record, _ in watched[:MAX_PODS]:
        if series + len(record.engines) > MAX_SERIES:
            break
        kept.append(_Pod.of(t, record))
        series += len(record.engines)
    episodes, view, counts = policy.episodes(now), policy.view(now), {s: engines.get(s, 0) for s in ENGINE_STATES}

    def build() -> Mapping[str, Any]:
        return {
            "version": __version__, "leader": leader, "engines": counts,
            "clock_skew_s": None if clock_skew_s is None else round(clock_skew_s, 1),
            "pods_watched": len(watched), "truncated": {"pods": len(watched) - len(kept)},
            "namespaces_unreadable": [
                {"namespace": ns, "why": u.why, "status": u.status or None, "for_s": round(now - u.since, 1)}
                for ns, u in sorted((unreadable or {}).items())],
            "policy": view, "pods": [_pod(pod, names[pod.target.target_name], episodes, now) for pod in kept],
            "targets_conflict": [
                {"namespace": o.namespace, "pod": o.name, "uid": o.uid, "targets": list(o.targets),
                 "reason": "targets_conflict", "why": o.note} for o in conflicts[:MAX_PODS]],
        }

    return Snapshot(now, build)


def document(snap: Snapshot | None, live: Liveness) -> bytes:
    """The JSON answer of ``/status``: the live cycle facts, then the latest snapshot (``null`` fields before the
    first completed cycle)."""
    def ago(t: float | None) -> float | None:
        return None if t is None else round(live.now - t, 1)

    head = {
        "snapshot_age_s": ago(snap.taken_at if snap else None),
        "cycle": {"started_s_ago": ago(live.started), "completed_s_ago": ago(live.completed),
                  "last_error": live.failed[1] if live.failed else None,
                  "last_error_s_ago": ago(live.failed[0] if live.failed else None)},
    }
    if snap is None:
        return json.dumps({**head, "pods": None, "policy": None}).encode()
    return json.dumps(head).encode()[:-1] + b", " + snap.body[1:]  # one object: the live head, then the doc
