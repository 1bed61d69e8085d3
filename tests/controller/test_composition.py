"""The composition rules of issue 28 (items 1 and 2), read from the source: a pod's record is written only in
watchdog/controller/state.py (readings go in, verdicts come out), and no module constructs an adapter but the
composition root (watchdog/controller/wiring.py) and the adapters themselves."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import watchdog
from watchdog.controller.state import EngineRecord, PodRecord

PACKAGE = Path(watchdog.__file__).parent
FIELDS = {f.name for f in dataclasses.fields(PodRecord)} | {f.name for f in dataclasses.fields(EngineRecord)}


def _modules(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "demo" not in p.relative_to(PACKAGE).parts)


def _assigned(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, attribute) of every attribute assignment whose attribute is a field of a pod's record, on anything
    but ``self`` (a class assigning its own attributes of the same name is not a pod's record)."""
    out = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        while targets:
            target = targets.pop()
            if isinstance(target, ast.Tuple | ast.List):
                targets.extend(target.elts)
            elif isinstance(target, ast.Attribute) and target.attr in FIELDS and not (
                    isinstance(target.value, ast.Name) and target.value.id == "self"):
                out.append((node.lineno, target.attr))
    return sorted(out)


def test_only_state_assigns_the_fields_of_a_pods_record() -> None:
    modules = [*_modules(PACKAGE / "controller"), *_modules(PACKAGE / "cli")]
    found = {str(p.relative_to(PACKAGE)): hits for p in modules
             if p.name != "state.py" and (hits := _assigned(ast.parse(p.read_text())))}
    assert found == {}


def test_the_record_check_sees_an_assignment(tmp_path: Path) -> None:
    assert _assigned(ast.parse("pod.scrape_detail = 'x'\npod.outcome, x = 'ok', 1\nself.outcome = 1\n")) == [
        (1, "scrape_detail"), (2, "outcome")]


def _adapter_classes() -> set[str]:
    """The classes of watchdog/adapters that do I/O: not exceptions, not plain data (dataclasses)."""
    names = set()
    for path in (PACKAGE / "adapters").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = {ast.unparse(b) for b in node.bases}
            data = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
            if not data and not any(b.endswith(("Error", "Exception", "Protocol", "Fenced")) for b in bases):
                names.add(node.name)
    return names


def _constructions(tree: ast.AST, classes: set[str]) -> list[tuple[int, str]]:
    return [(node.lineno, node.func.id) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes]


def test_only_the_composition_root_constructs_an_adapter() -> None:
    classes = _adapter_classes() | {"Actuator"}  # the actuator (controller/actuator.py) is wired like an adapter
    assert {"AsyncScraper", "PrometheusClient", "EventRecorder", "KubeClient"} <= classes
    modules = [*_modules(PACKAGE / "controller"), *_modules(PACKAGE / "cli")]  # check builds its transports there too
    found = {str(p.relative_to(PACKAGE)): hits for p in modules
             if p.name != "wiring.py" and (hits := _constructions(ast.parse(p.read_text()), classes))}
    assert found == {}


def test_the_construction_check_sees_one(tmp_path: Path) -> None:
    assert _constructions(ast.parse("x = AsyncScraper(limits)\ny = Other()\n"), {"AsyncScraper"}) == [
        (1, "AsyncScraper")]
