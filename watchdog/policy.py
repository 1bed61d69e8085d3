"""The deletion policy: given a stall, may the watchdog delete now, only report it, or hold off? Pure.

Today's rules, in order:

1. A namespace labelled ``vllm-watchdog.io/enabled=dry-run``, or the global ``dryRun`` setting, turns every
   deletion into a ``StalledPodDryRun`` Event.
2. One decision per stall episode: a pod+engine series whose stall was already acted on (or announced in
   dry-run) is not acted on again until its engine leaves the stalled state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Action = Literal["delete", "dry_run", "skip"]

REASON_DELETED = "StalledPodDeleted"
REASON_DRY_RUN = "StalledPodDryRun"


@dataclass(frozen=True)
class Decision:
    """``action``: delete | dry_run | skip; ``why``: one human phrase for logs."""

    action: Action
    why: str


@dataclass
class DeletionPolicy:
    """Keeps the few facts the rules need across cycles, keyed by pod UID (never by name or IP)."""

    global_dry_run: bool = False
    _acted: set[tuple[str, str]] = field(default_factory=set)

    def decide(self, uid: str, series: str, namespace_mode: str) -> Decision:
        """Decide for a stalled engine ``series`` of pod ``uid`` in a namespace with ``namespace_mode``
        (``enforce`` or ``dry-run``)."""
        if (uid, series) in self._acted:
            return Decision("skip", "already acted on this stall episode")
        if self.global_dry_run:
            return Decision("dry_run", "global dryRun is on")
        if namespace_mode != "enforce":
            return Decision("dry_run", "namespace is labelled dry-run")
        return Decision("delete", "namespace is enforced")

    def record(self, uid: str, series: str) -> None:
        """Remember that this stall episode was acted on (deleted or announced)."""
        self._acted.add((uid, series))

    def episode_over(self, uid: str, series: str) -> None:
        """The engine series left the stalled state: a later stall is a new episode."""
        self._acted.discard((uid, series))

    def forget_pods(self, live_uids: set[str]) -> None:
        """Drop what is known about pods that are gone."""
        self._acted = {k for k in self._acted if k[0] in live_uids}
