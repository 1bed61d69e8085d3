"""Kubernetes Event bodies and reasons (core/v1): what the watchdog tells ``kubectl describe``. Pure: the
caller passes the time; :mod:`watchdog.adapters.events` writes them, best effort.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Literal

from watchdog.core.detector import Verdict, window_slack
from watchdog.core.detector import _fmt as number  # the detector's number format: one rule for logs and Events
from watchdog.core.model import COMPONENT

REASON_DELETED = "StalledPodDeleted"
REASON_DRY_RUN = "StalledPodDryRun"
REASON_DEFERRED = "StalledPodDeletionDeferred"
REASON_QUARANTINED = "StalledPodQuarantined"  # the readiness gate set False (watchdog.core.quarantine)
REASON_RELEASED = "StalledPodReleased"  # the readiness gate set True again after a quarantine
#: The pod's vllm-watchdog.io/window-seconds annotation was ignored (shorter, malformed, above the ceiling).
REASON_WINDOW_IGNORED = "StallWindowAnnotationIgnored"
#: Several targets that differ match the pod: which one judges it, or that their profiles conflict (core/podpolicy).
REASON_TARGETS_OVERLAP = "StallTargetsOverlap"
#: The pod's vllm-watchdog.io/paused-until annotation was ignored (malformed, beyond maxPodPauseSeconds).
REASON_PAUSE_IGNORED = "StallPauseAnnotationIgnored"
#: Nodes are cluster-scoped: the API server accepts their core/v1 Events in "default".
NODE_EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024
#: At most this many characters of an engine series key (pod-controlled label values) in a message.
MAX_ENGINE_KEY = 160
__all__ = ["COMPONENT", "MAX_ENGINE_KEY", "MAX_MESSAGE", "NODE_EVENT_NAMESPACE", "REASON_DEFERRED", "REASON_DELETED",
           "REASON_DRY_RUN", "REASON_PAUSE_IGNORED", "REASON_QUARANTINED", "REASON_RELEASED",
           "REASON_TARGETS_OVERLAP", "REASON_WINDOW_IGNORED", "StallOutcome",
           "escape_controls", "event_body", "frees_phrase", "stall_message", "utc_stamp"]

StallOutcome = Literal["deleted", "evicted", "dry_run", "deferred"]
_WHAT: dict[StallOutcome, str] = {"deleted": "Deleted pod", "evicted": "Evicted pod", "dry_run": "Would delete pod",
                             "deferred": "Deferred deletion of pod"}

# Characters a pod can put into its label values, names and annotation values that would rewrite what a reader
# sees: C0 controls (CR moves back over the line, ESC starts terminal sequences, LF forges a new log line), DEL,
# C1 controls (U+0085 is a line break too), the Unicode line/paragraph separators and the bidirectional
# overrides and isolates that reorder displayed text.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = {c: _NAMED.get(chr(c), f"\\x{c:02x}") for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                            *range(0x2066, 0x206A))})


def escape_controls(text: str) -> str:
    """``text`` with every control character written as a visible escape (``\\r``, ``\\x1b``, ``\\u2028``):
    the one rule for every place a pod-controlled string is written (text logs, Event messages). Printable text,
    backslashes included, is left as it is."""
    return text if text.isprintable() else text.translate(_ESCAPES)


def utc_stamp(when: dt.datetime) -> str:
    """``when`` as ISO 8601 UTC to the second, ``2026-12-01T05:12:00Z`` (Event timestamps and messages)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def frees_phrase(frees_in_s: float | None, frees_when: str, wall_now: float) -> str:
    """When a held action may happen, from a deferral's ``frees_in_s`` and ``frees_when`` (the policy's
    :class:`~watchdog.core.policy.Decision`), for the Event message and the log line: ``may proceed in 450 s (at
    2026-12-01T05:42:00Z), when ...`` where time frees it (the caller's wall clock ``wall_now``, Unix seconds, plus
    ``frees_in_s``, both rounded up to the second: never a moment before it frees), else ``may proceed when ...``;
    "" when nothing is known."""
    if frees_in_s is None:
        return f"may proceed {frees_when}" if frees_when else ""
    at = dt.datetime.fromtimestamp(math.ceil(round(wall_now + frees_in_s, 3)), dt.UTC)
    return (f"may proceed in {math.ceil(round(frees_in_s, 3))} s (at {utc_stamp(at)})"
            + (f", {frees_when}" if frees_when else ""))


#: Where the window came from, as an Event says it (core/podpolicy's WindowSource).
_FROM = {"global": "global", "target": "set by its target", "annotation": "set by its pod annotation"}


def engine_phrase(engine: str) -> str:
    """`` engine {<key>}`` for a message (the key cut to MAX_ENGINE_KEY), or "" for the one unlabelled series."""
    if len(engine) > MAX_ENGINE_KEY:
        engine = engine[: MAX_ENGINE_KEY - 3] + "..."
    return f" engine {{{engine}}}" if engine else ""


def stall_message(outcome: StallOutcome, pod: str, engine: str, verdict: Verdict, since: dt.datetime | None, *,
                  rule: str = "", why: str = "", evidence: str = "", frees: str = "", window_source: str = "") -> str:
    """The Event message for a decision on a stalled engine, facts first, so the head survives the 1 KiB cut:
    what (deleted, evicted, would delete, deferred), the pod and engine series, for how long no progress, the
    requests running (waiting), the frozen progress signals at their values, since when (UTC), then why: the
    stall rule (window, busy samples), plus ``why`` (the dry-run reason, a lost answer), or for a deferral the
    ``rule`` and ``why`` that held it back and when it may proceed (``frees``: :func:`frees_phrase`); last the
    short ``evidence`` pointer (where the full record is). ``window_source``: where the window came from (global,
    target, annotation), said with it. Built from the verdict's structured fields, never its
    reason sentence; :func:`event_body` escapes control characters and cuts it."""
    load = f"{number(verdict.running)} requests running"
    if verdict.waiting is not None:
        load += f" ({number(verdict.waiting)} waiting)"
    frozen = " ".join(f"{name}={number(value)}" for name, value in verdict.frozen) or "none known"
    notes = [_FROM.get(window_source, window_source)] if window_source else []
    if verdict.stalled_for_s < verdict.window_s:  # reached within the detector's slack (its rule 4)
        notes.append(f"less its {number(window_slack(verdict.window_s))} s slack")
    window = f"{verdict.window_s:.0f} s window" + (f" ({'; '.join(notes)})" if notes else "")
    stalled = f"stalled past the {window} over {verdict.busy_samples} busy samples"
    if outcome == "deferred":
        because = f"rule {rule}, {why}" + (f"; {frees}" if frees else "")
    elif outcome == "dry_run":
        because = f"{stalled}; dry-run, {why}"
    else:
        because = f"{stalled}; {why}" if why else stalled
    return (f"{_WHAT[outcome]} {pod}" + engine_phrase(engine)
            + f": no progress for {verdict.stalled_for_s:.0f} s, {load}, frozen {frozen}"
            + (f" since {utc_stamp(since)}" if since is not None else "") + f". Why: {because}."
            + (f" {evidence}." if evidence else ""))


def event_body(namespace: str, involved: dict[str, str], reason: str, message: str, instance: str,
               now: dt.datetime, action: str = "None", *, once: bool = False) -> dict[str, Any]:
    """A core/v1 Event (type Warning) on ``involved`` ({apiVersion, kind, name, uid}) at ``now`` (UTC);
    message with control characters escaped (:func:`escape_controls`), then cut to 1 KiB. ``once``: named after
    the object's UID and the reason, so a second create of it (after a restart, by another replica) is refused
    with 409 while the first is kept (the API server's Event TTL, 1 h by default) instead of written again."""
    stamp = utc_stamp(now)
    message = escape_controls(message)
    if len(message.encode()) > MAX_MESSAGE:
        message = message.encode()[: MAX_MESSAGE - 3].decode("utf-8", "ignore") + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**({"name": f"{involved['uid']}.{reason.lower()}"} if once else
                        {"generateName": f"{involved['name']}."}), "namespace": namespace},
        # Nodes are cluster-scoped: their Events live in "default" but the object itself has no namespace.
        "involvedObject": dict(involved) if involved.get("kind") == "Node" else {**involved, "namespace": namespace},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "action": action,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
