"""A metric's value as a dashboard's ``sum by ()`` reads it: the per-workload metrics carry ``namespace`` and
``target`` (watchdog/adapters/metrics.py), so a test that asks for a total sums over the labels it does not name."""

from __future__ import annotations

from prometheus_client import CollectorRegistry


def summed(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The sum of every sample ``name`` whose labels include ``labels``; None when there is none."""
    want = (labels or {}).items()
    values = [s.value for f in registry.collect() for s in f.samples if s.name == name and want <= s.labels.items()]
    return sum(values) if values else None
