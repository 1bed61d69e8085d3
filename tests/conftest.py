"""Shared fixtures: a started Kubernetes API emulator (kmock-based, real HTTP; not a cluster), and the process's
logging set-up put back after a test that configures it. Tests under tests/chart/ are marked ``chart`` and under
tests/image/ ``image`` here, by folder (they run in the default suite; `make test-fast` leaves them out)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.demo.emulator import EmulatorServer

HERE = Path(__file__).resolve().parent
FOLDER_MARKERS = {"chart": pytest.mark.chart, "image": pytest.mark.image}  # tests/<folder>/ -> its marker


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `-m "not chart"` sees the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by its folder (FOLDER_MARKERS)."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if HERE in path.parents:
            marker = FOLDER_MARKERS.get(path.relative_to(HERE).parts[0])
            if marker is not None:
                item.add_marker(marker)


@pytest.fixture
def emulator() -> Iterator[EmulatorServer]:
    """A started :class:`EmulatorServer` on 127.0.0.1 (a free port), stopped after the test."""
    with EmulatorServer() as server:
        yield server


@pytest.fixture
def kube_client(emulator: EmulatorServer) -> KubeClient:
    """A :class:`KubeClient` talking to :func:`emulator` over HTTP (no auth)."""
    return KubeClient.from_settings(KubeSettings(host=emulator.base_url, request_timeout_s=5))


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root handlers and the levels of the loggers the watchdog configures back after the test."""
    loggers = [logging.getLogger(name) for name in ("", "watchdog", "urllib3", "apscheduler", "kubernetes")]
    handlers, levels = logging.getLogger().handlers[:], [lg.level for lg in loggers]
    yield
    logging.getLogger().handlers[:] = handlers
    for lg, level in zip(loggers, levels, strict=True):
        lg.setLevel(level)


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> Counter[object]:
    """The body bytes each urllib3 response has handed out by ``read1`` (what the reader took into memory), by
    response."""
    counts: Counter[object] = Counter()
    real = urllib3.response.HTTPResponse.read1

    def counting(self: urllib3.response.HTTPResponse, *args: object, **kwargs: object) -> bytes:
        data = real(self, *args, **kwargs)  # type: ignore[arg-type]
        counts[self] += len(data)
        return data

    monkeypatch.setattr(urllib3.response.HTTPResponse, "read1", counting)
    return counts
