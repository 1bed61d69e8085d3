"""Per-workload signals: which (namespace, target) label pairs the watchdog's metrics carry, and what the per-engine
gauge says of one engine series (:mod:`watchdog.adapters.metrics` holds the series; the cycle feeds them).

A pair is watched while its namespace is opted in (and, in namespace-only mode, listed in ``watchNamespaces``) and
its target is configured: at most opted-in namespaces x targets pairs, whether or not pods run there right now (a
Deployment scaled to 0 keeps its zeros instead of its series flapping). A namespace that opts out, or a target
removed from the config, takes every series of its pairs with it at the next cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from watchdog.adapters.metrics import Workload
from watchdog.core.detector import Verdict


def watched_workloads(modes: Mapping[str, str], targets: Iterable[str],
                      only: Collection[str] | None = None) -> set[Workload]:
    """The (namespace, target) pairs of this cycle: every opted-in namespace (``modes``; within ``only`` when set)
    with every target name."""
    names = list(targets)
    return {(ns, t) for ns in modes if only is None or ns in only for t in names}


def seconds_without_progress(verdict: Verdict | None) -> float:
    """The per-engine gauge's value: how long a busy engine has gone without progress (its stall clock), 0 while
    idle, progressing or unknown (unknown is never evidence; the engine-state gauge counts it)."""
    if verdict is None or verdict.state not in ("suspect", "stalled"):
        return 0.0
    return verdict.stalled_for_s
