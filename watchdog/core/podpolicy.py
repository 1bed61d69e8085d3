"""A pod's effective stall policy, said in ONE place (:func:`policy_of`). Pure.

The global settings (``windowSeconds``, ``minSamples``, ``action``, ``completionOnlyWindowSeconds``) hold unless
the pod's target sets its own (``targets[].windowSeconds`` ...; validated by the loader with the global rows'
bounds and cross-checks); the pod's annotation ``vllm-watchdog.io/window-seconds`` may then LENGTHEN its window,
never shorten it, up to the cluster-set ceiling ``maxPodWindowSeconds``. The annotation is tenant input: it is
read strictly (plain decimal digits, at most :data:`MAX_ANNOTATION_CHARS` characters, a finite number) and any
other value is ignored with the reason returned (the caller records one Warning Event per pod).
A lengthened window also lengthens a completion-only window that is on and shorter (it is never shorter than the
window). The deletion policy's warm-up and minimum pod age stay on the global window (core/policy.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from watchdog.core.model import WINDOW_ANNOTATION, Target
from watchdog.core.vocab import StallAction, WindowSource

#: The longest annotation value read at all; anything longer is malformed.
MAX_ANNOTATION_CHARS = 16
_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?", flags=re.ASCII)


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
