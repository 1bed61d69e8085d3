"""The `prometheus` tier: a real Prometheus (Debian's /usr/bin/prometheus) on loopback scraping simulated vLLM
pods through file_sd, with the `namespace` and `pod` labels Kubernetes service discovery would add, and the
real watchdog process (`source: prometheus`) reading the signals from it. Helpers: prom_kit.py.

Run it with `make test-prometheus` (not part of the default run: marker `prometheus`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prom_kit import PrometheusServer, new_prometheus


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """One Prometheus for the session; its targets are whatever the tests set."""
    server = new_prometheus(tmp_path_factory.mktemp("prometheus"))
    try:
        yield server
    finally:
        server.stop()
