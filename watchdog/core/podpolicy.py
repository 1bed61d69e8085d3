"""A pod's effective stall policy, said in ONE place (:func:`policy_of`). Pure.

The global settings (``windowSeconds``, ``minSamples``, ``action``, ``completionOnlyWindowSeconds``) hold unless
the pod's target sets its own (``targets[].windowSeconds`` ...; validated by the loader with the global rows'
bounds and cross-checks); the pod's annotation ``vllm-watchdog.io/window-seconds`` may then LENGTHEN its window,
never shorten it, up to the cluster-set ceiling ``maxPodWindowSeconds``. The annotation is tenant input: it is
read strictly (plain decimal digits, at most :data:`MAX_ANNOTATION_CHARS` characters, a finite number) and any
other value is ignored with the reason returned (the caller records one Warning Event per pod).
A lengthened window also lengthens a completion-only window that is on and shorter (it is never shorter than the
window). The deletion policy's warm-up and minimum pod age stay on the global window (core/policy.py).

Which target a pod belongs to is said here too, in ONE place (:func:`resolve_target`, called by discovery for
``run`` and by ``check``/``replay --config``): a pod whose labels several targets' ``podSelector``s match is judged
by the matching target with the LONGEST window (the most patient: no pod is removed sooner than any target that
claims it allows; equal windows: the first listed), and everything else of that target applies to it (min
samples, action, completion-only window, profile, port, path, source). Two matching targets with different
engine profiles disagree on what progress is: such a pod is not judged at all (unknown, ``targets_conflict``).

A pod's annotation ``vllm-watchdog.io/paused-until`` (an RFC 3339 time, set by the controller that pauses its
engine: a checkpoint, a weight update) makes its engines read ``paused`` while the caller's wall clock is before
that time (:func:`paused_until`): for pauses no metric reveals. It is read just as strictly and bounded by the
ceiling ``maxPodPauseSeconds``: a value further in the future, or malformed, is ignored with the reason returned.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from watchdog.core.model import PAUSE_ANNOTATION, WINDOW_ANNOTATION, Target
from watchdog.core.vocab import StallAction, WindowSource

#: The longest annotation value read at all; anything longer is malformed.
MAX_ANNOTATION_CHARS = 16
_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?", flags=re.ASCII)
#: The longest pause annotation value read at all (``2026-12-05T22:00:00.123456+01:00`` is 32).
MAX_PAUSE_CHARS = 40
#: RFC 3339 as written by Go's and Python's formatters: date, upper-case ``T``, time, optional fraction, ``Z``
#: or a numeric offset.
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
                      flags=re.ASCII)


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """How patient the watchdog is with one pod: its stall window (seconds) and where that came from, the busy
    samples needed inside it, what is done to a stalled pod, and the completion-only window (0: off)."""

    window_s: float
    min_samples: int
    action: StallAction
    completion_only_window_s: float
    window_source: WindowSource = "global"

    def describe(self) -> str:
        """One line for humans (``check``, ``replay``, logs)."""
        completion = f"{self.completion_only_window_s:g} s" if self.completion_only_window_s else "off"
        return (f"window {self.window_s:g} s ({self.window_source}), min samples {self.min_samples}, action "
                f"{self.action}, completion-only window {completion}")

    def as_dict(self) -> dict[str, object]:
        return {"window_s": self.window_s, "window_source": self.window_source, "min_samples": self.min_samples,
                "action": self.action, "completion_only_window_s": self.completion_only_window_s}


def policy_of(base: EffectivePolicy, target: Target | None = None, annotation: str | None = None,
              ceiling_s: float = 0.0) -> tuple[EffectivePolicy, str]:
    """The effective policy of a pod of ``target`` carrying the window ``annotation`` (None: none), from the
    global ``base`` (source "global") and the annotation ceiling ``ceiling_s`` (maxPodWindowSeconds); and why the
    annotation was ignored ("" when it was taken, or there is none)."""
    policy = base
    if target is not None:
        policy = EffectivePolicy(
            window_s=base.window_s if target.window_seconds is None else float(target.window_seconds),
            min_samples=base.min_samples if target.min_samples is None else target.min_samples,
            action=base.action if target.action is None else target.action,
            completion_only_window_s=(base.completion_only_window_s if target.completion_only_window_seconds is None
                                      else float(target.completion_only_window_seconds)),
            window_source="global" if target.window_seconds is None else "target")
    if annotation is None:
        return policy, ""
    window, why = _annotated_window(annotation, policy.window_s, ceiling_s)
    if window is None:
        return policy, why
    completion = policy.completion_only_window_s
    return replace(policy, window_s=window, window_source="annotation",
                   completion_only_window_s=max(completion, window) if completion else 0.0), ""


def _annotated_window(raw: str, own_s: float, ceiling_s: float) -> tuple[float | None, str]:
    """The window the annotation asks for, or None and why it is ignored."""
    shown = raw if len(raw) <= MAX_ANNOTATION_CHARS else raw[:MAX_ANNOTATION_CHARS] + "..."
    head = f"annotation {WINDOW_ANNOTATION}={shown!r} ignored"
    text = raw.strip()
    if len(text) > MAX_ANNOTATION_CHARS or not _DECIMAL.fullmatch(text):
        return None, f"{head}: not a plain number of seconds (e.g. \"900\")"
    value = float(text)
    if not math.isfinite(value):  # unreachable with the digits above; the bound stays explicit
        return None, f"{head}: not a finite number"
    if value < own_s:
        return None, f"{head}: it may only lengthen the pod's {own_s:g} s window, never shorten it"
    if value > ceiling_s:
        return None, f"{head}: above the ceiling maxPodWindowSeconds ({ceiling_s:g} s)"
    return value, ""


@dataclass(frozen=True, slots=True)
class Resolution:
    """Which of the targets matching one pod judges it: ``target`` (None: their profiles conflict, the pod is not
    judged); ``matches``: every matching target, in configuration order; ``note``: one line saying the choice or the
    conflict when the matches differ in anything (for the log and the pod's Warning Event), "" otherwise."""

    target: Target | None
    matches: tuple[Target, ...]
    note: str = ""


def resolve_target(matches: Sequence[Target], base: EffectivePolicy) -> Resolution:
    """The one rule (module docstring) for a pod matched by ``matches`` (at least one, in configuration order),
    with the global policy ``base``."""
    windows = [policy_of(base, t)[0].window_s for t in matches]
    chosen = matches[windows.index(max(windows))]  # index(): the first of equal windows
    if len(matches) == 1 or len({_how(base, t) for t in matches}) == 1:
        return Resolution(chosen, tuple(matches))  # interchangeable targets: no choice was made
    if len({(t.profile, _frozen(t.metrics)) for t in matches}) > 1:
        said = ", ".join(f"{t.name} (profile {t.profile}{' custom' if t.metrics else ''})" for t in matches)
        return Resolution(None, tuple(matches), f"matched by targets {said}, whose engine profiles disagree on what "
                                                f"progress is: not judged (unknown, targets_conflict) until only one "
                                                f"of their podSelectors matches it")
    said = ", ".join(f"{t.name} (window {w:g} s)" for t, w in zip(matches, windows, strict=True))
    tie = " (the first listed of equal windows)" if windows.count(max(windows)) > 1 else ""
    return Resolution(chosen, tuple(matches), f"matched by targets {said}: judged by {chosen.name}, the longest "
                                              f"window{tie}, with all of that target's settings")


def _how(base: EffectivePolicy, target: Target) -> tuple[object, ...]:
    """Everything that decides how a pod of ``target`` is read and judged (its name and selector aside)."""
    policy = replace(policy_of(base, target)[0], window_source="global")
    return (policy, target.profile, _frozen(target.metrics), target.port, target.path, target.source)


def _frozen(metrics: Mapping[str, object]) -> str:
    """A custom profile's keys as comparable text (its values are lists and strings)."""
    return repr(sorted(metrics.items()))


def paused_until(raw: str | None, wall_now: float, ceiling_s: float) -> tuple[float | None, str]:
    """The time (Unix seconds) until which the pause ``annotation`` ``raw`` (None: none) holds the pod's engines
    paused, judged at the caller's wall clock ``wall_now`` (Unix seconds), or None when it does not hold (none,
    already past, or ignored); and why it was ignored: malformed, or more than ``ceiling_s``
    (maxPodPauseSeconds) after ``wall_now`` ("" when taken, past, or there is none)."""
    if raw is None:
        return None, ""
    shown = raw if len(raw) <= MAX_PAUSE_CHARS else raw[:MAX_PAUSE_CHARS] + "..."
    head = f"annotation {PAUSE_ANNOTATION}={shown!r} ignored"
    text = raw.strip()
    until = _rfc3339(text) if len(text) <= MAX_PAUSE_CHARS else None
    if until is None:
        return None, f"{head}: not an RFC 3339 time (e.g. \"2026-12-05T22:30:00Z\")"
    if until <= wall_now:
        return None, ""
    if until - wall_now > ceiling_s:
        return None, (f"{head}: {until - wall_now:.0f} s ahead, above the ceiling maxPodPauseSeconds "
                      f"({ceiling_s:g} s)")
    return until, ""


def _rfc3339(text: str) -> float | None:
    """``text`` (strict RFC 3339, see :data:`_RFC3339`) as Unix seconds, or None."""
    if not _RFC3339.fullmatch(text):
        return None
    try:  # Python 3.11's fromisoformat takes any number of fraction digits and Z
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:  # month 13, hour 25, offset +99:00
        return None
