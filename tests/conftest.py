"""Shared fixtures: a started Kubernetes API emulator (kmock-based, real HTTP; not a cluster)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.demo.emulator import EmulatorServer


@pytest.fixture
def emulator() -> Iterator[EmulatorServer]:
    """A started :class:`EmulatorServer` on 127.0.0.1 (a free port), stopped after the test."""
    with EmulatorServer() as server:
        yield server


@pytest.fixture
def kube_client(emulator: EmulatorServer) -> KubeClient:
    """A :class:`KubeClient` talking to :func:`emulator` over HTTP (no auth)."""
    return KubeClient.from_settings(KubeSettings(host=emulator.base_url, request_timeout_s=5))
