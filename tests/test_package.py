"""Packaging facts: ``import watchdog`` is this project, the pure core stays pure, modules stay small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import watchdog

PACKAGE = Path(watchdog.__file__).parent
PURE_MODULES = ("detector", "parsing", "profiles", "policy")
FORBIDDEN = {"kubernetes", "requests", "urllib3", "socket", "http", "apscheduler", "aiohttp", "time"}


def test_import_watchdog_is_this_project_not_the_filesystem_events_package() -> None:
    assert watchdog.PROJECT_MARKER == "vllm-stall-watchdog"
    assert (PACKAGE / "detector.py").exists()
    assert not hasattr(watchdog, "observers")  # the PyPI 'watchdog' package has watchdog.observers


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pure_core_imports_no_io_modules() -> None:
    checked = 0
    for name in PURE_MODULES:
        path = PACKAGE / f"{name}.py"
        if path.exists():
            checked += 1
            bad = imports_of(path) & FORBIDDEN
            assert not bad, f"{path.name} imports {sorted(bad)}"
    assert checked >= 1


def test_pure_core_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import math\nfrom kubernetes import client\n")
    assert imports_of(probe) & FORBIDDEN == {"kubernetes"}


def test_import_linter_contract_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(PACKAGE.parent)
    assert lint_imports(config_filename="pyproject.toml", no_cache=True, no_logo=True) == 0


def test_modules_stay_small() -> None:
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines <= 400, f"{path.relative_to(PACKAGE)} has {lines} lines"
