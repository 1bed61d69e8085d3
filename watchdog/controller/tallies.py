"""This cycle's breaker tallies: how many pods were watched and how many looked bad, fleet-wide and per namespace."""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.core.model import WatchedPod
from watchdog.core.policy import votes


@dataclass
class BreakerTallies:
    """This cycle's pods for the breakers (the rule: :class:`~watchdog.core.policy.DeletionPolicy`'s docstring).
    Fleet-wide: only the pods that vote (:func:`~watchdog.core.policy.votes`: in an enforced namespace), counted
    per tenant (:attr:`spread`: the fleet breaker opens only if it would with any one tenant left out); stalled:
    a stalled engine series (unknown is never evidence). Per namespace (every watched pod): a stalled series, a
    failed scrape, or no usable series in the body (a series that merely vanished from an otherwise good body does
    not count)."""

    watched: int = 0
    stalled: int = 0
    by_namespace: dict[str, tuple[int, int]] = field(default_factory=dict)  # namespace -> (watched, bad)
    spread: dict[str, tuple[int, int]] = field(default_factory=dict)  # tenant -> (voting pods, of them stalled)

    def add(self, pod: WatchedPod, scraped: bool, present: set[str]) -> None:
        stalled = "stalled" in present
        bad = stalled or not scraped or not present or present <= {"unknown"}
        watched, seen_bad = self.by_namespace.get(pod.namespace, (0, 0))
        self.by_namespace[pod.namespace] = (watched + 1, seen_bad + bad)
        if votes(pod):
            self.watched += 1
            self.stalled += stalled
            voting, voted_stalled = self.spread.get(pod.tenant, (0, 0))
            self.spread[pod.tenant] = (voting + 1, voted_stalled + stalled)
