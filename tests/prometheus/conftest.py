"""The `prometheus` tier: a real Prometheus on loopback scraping simulated vLLM pods through file_sd, with the
`namespace` and `pod` labels Kubernetes service discovery would add, and the real watchdog process (`source:
prometheus`) reading the signals from it. Every test runs on each server flavour (prom_kit.FLAVOURS): Debian's
Prometheus 2.42, a Prometheus 3.x built from the official Go module, and an HA pair of 3.x replicas behind a
deduplicating Thanos Query. Helpers: prom_kit.py.

Run it with `make test-prometheus` (not part of the default run: marker `prometheus`); the builds first:
`bash tests/prometheus/build_prometheus.sh` (cached outside the clone).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prom_kit import FLAVOURS, Server, new_prometheus


@pytest.fixture(scope="session", params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    """Which server the test runs against (one of prom_kit.FLAVOURS)."""
    return str(request.param)


@pytest.fixture(scope="session")
def prometheus(flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server of the flavour for the session; its targets are whatever the tests set."""
    server = new_prometheus(tmp_path_factory.mktemp(f"prometheus-{flavour}"), flavour)
    try:
        yield server
    finally:
        server.stop()
