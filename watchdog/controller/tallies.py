"""This cycle's breaker tallies: how many pods were watched and how many looked bad, fleet-wide and per namespace."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BreakerTallies:
    """This cycle's pods for the breakers. Fleet-wide: pods with a stalled engine series (unknown is never
    evidence, and a tenant's pods that serve nothing must not blind the watchdog for every other namespace).
    Per namespace: pods with a stalled series, a failed scrape, or no usable series in the body (a series that
    merely vanished from an otherwise good body does not count). The fleet-wide tally is kept per namespace too
    (:attr:`spread`): the fleet breaker opens only if it would with any one namespace left out."""

    watched: int = 0
    stalled: int = 0
    by_namespace: dict[str, tuple[int, int]] = field(default_factory=dict)  # namespace -> (watched, bad)
    stalled_in: dict[str, int] = field(default_factory=dict)  # namespace -> its pods with a stalled series

    def add(self, namespace: str, scraped: bool, present: set[str]) -> None:
        stalled = "stalled" in present
        bad = stalled or not scraped or not present or present <= {"unknown"}
        self.watched += 1
        self.stalled += stalled
        watched, seen_bad = self.by_namespace.get(namespace, (0, 0))
        self.by_namespace[namespace] = (watched + 1, seen_bad + bad)
        self.stalled_in[namespace] = self.stalled_in.get(namespace, 0) + stalled

    @property
    def spread(self) -> dict[str, tuple[int, int]]:
        """The fleet-wide tally per namespace: namespace -> (watched, stalled)."""
        return {ns: (watched, self.stalled_in.get(ns, 0)) for ns, (watched, _) in self.by_namespace.items()}
