"""Fixtures of the ``release`` tier: a real OCI registry on loopback (Debian's ``docker-registry``: distribution
v2, its own config file, storage in a temporary directory) for ``tests/release/release.py`` to push into.

The tier pushes the watchdog OCI archive ``tests/image/oci_archive.py`` built (``.ci/run`` builds it in the step
before); it never builds one itself (that fetches Debian packages and wheels, and tests talk only to loopback).
Without ``docker-registry``, ``skopeo`` or an archive newer than its inputs every test of the tier is skipped with
one reason (``RELEASE_REUSE_IMAGE=1`` takes an older archive locally); with ``CI=true`` that is an error instead,
so CI cannot pass by not running the tier.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # registry_kit, release
sys.path.insert(0, str(HERE.parent))  # tests/tools.py, daemon_kit.py

from daemon_kit import unready  # noqa: E402
from registry_kit import IN_CI, REUSE_STALE, Registry  # noqa: E402

from watchdog.demo.controlplane.api import free_port  # noqa: E402
from watchdog.demo.node.images import watchdog_archive  # noqa: E402


def _unavailable() -> str | None:
    missing = [tool for tool in ("docker-registry", "skopeo") if not shutil.which(tool)]
    if missing:
        return (f"the release tier cannot run: {' and '.join(missing)} missing "
                "(apt-get install -y docker-registry skopeo)")
    if watchdog_archive(fresh_only=not REUSE_STALE) is None:
        return ("the release tier cannot run: no watchdog OCI archive newer than its inputs: build one with "
                "`sudo .venv/bin/python tests/image/oci_archive.py` (RELEASE_REUSE_IMAGE=1 takes an older one)")
    return None


UNAVAILABLE = _unavailable()


@pytest.hookimpl(trylast=True)  # after `-m` deselected: only a run that selected the tier is stopped
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = any(item.get_closest_marker("release") for item in items)
    if UNAVAILABLE is not None and ours and IN_CI:
        raise pytest.UsageError(f"CI=true and {UNAVAILABLE}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if UNAVAILABLE is not None and item.get_closest_marker("release"):
        pytest.skip(UNAVAILABLE)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A distribution v2 registry on 127.0.0.1 (plain HTTP, no auth), empty, stopped after the test."""
    storage = tmp_path / "registry-storage"
    storage.mkdir()
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "registry.yml"
    config.write_text(f"""version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: {address}
""")
    log = tmp_path / "registry.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
    the_registry = Registry(address, storage, log)
    try:
        if unready(proc, f"http://{address}/v2/", 30, answer_timeout_s=2) is not None:
            raise RuntimeError(f"docker-registry did not answer on {address}:\n{the_registry.log_tail()}")
        yield the_registry
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
