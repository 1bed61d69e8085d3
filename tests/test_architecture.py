"""The architecture, checked: ``import watchdog`` is this project; the layers only import downwards (the
import-linter contracts in pyproject.toml); the pure core imports no I/O and reads no clock; there is no import
cycle anywhere in the package (``TYPE_CHECKING`` imports included); one statement a line; the
offline verbs never load the Kubernetes client or the scheduler; no module under tests/ imports a test module (what
tests share lives in helper modules: builders.py, fakes.py, chart/chart_kit.py, controller/cycle_kit.py, ...)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import watchdog

PACKAGE = Path(watchdog.__file__).parent
LAYERS = ("cli", "controller", "demo", "adapters", "config", "core")
FORBIDDEN_IN_CORE = {"kubernetes", "requests", "urllib3", "socket", "http", "apscheduler", "aiohttp", "time",
                     "yaml", "threading", "subprocess", "os", "concurrent"}


def test_import_watchdog_is_this_project_not_the_filesystem_events_package() -> None:
    assert watchdog.PROJECT_MARKER == "vllm-stall-watchdog"
    assert (PACKAGE / "core" / "detector.py").exists()
    assert not hasattr(watchdog, "observers")  # the PyPI 'watchdog' package has watchdog.observers


def test_the_tree_shows_the_layers() -> None:
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists())
    assert top == sorted(["__init__.py", "__main__.py", *LAYERS])


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute, at any depth (inside functions and TYPE_CHECKING too)."""
    here = module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)  # `from pkg import module`
    return names


def package_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for imported in imports_of(path):
            if imported in modules and imported != name:
                graph[name].add(imported)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_in_the_package() -> None:
    graph = package_graph()
    assert len(graph) >= 25  # the graph really was built
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_cycle_finder_sees_a_cycle_hidden_behind_type_checking(tmp_path: Path) -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None
    probe = PACKAGE / "core" / "_probe_cycle.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from watchdog.core.x import y\n")
    try:
        assert "watchdog.core.x" in imports_of(probe)
    finally:
        probe.unlink()


def test_pure_core_imports_no_io_and_no_clock() -> None:
    checked = 0
    for path in (PACKAGE / "core").rglob("*.py"):
        checked += 1
        bad = {m.split(".")[0] for m in imports_of(path)} & FORBIDDEN_IN_CORE
        assert not bad, f"{path.name} imports {sorted(bad)}"
        text = path.read_text()
        for clock in ("datetime.now(", ".utcnow(", "time.time(", "monotonic("):
            assert clock not in text, f"{path.name} reads the clock ({clock})"
    assert checked >= 10


def test_layers_only_import_downwards() -> None:
    """cli -> controller | demo -> adapters | config -> core (each may import the ones to its right)."""
    rank = {"cli": 4, "controller": 3, "demo": 3, "adapters": 2, "config": 2, "core": 1}
    bad = []
    for source, targets in package_graph().items():
        src = source.split(".")[1] if source.count(".") else None
        for target in targets:
            dst = target.split(".")[1] if target.count(".") else None
            if src in rank and dst in rank and src != dst and rank[dst] >= rank[src]:
                bad.append(f"{source} -> {target}")
    assert not bad


def test_import_linter_contracts_hold() -> None:
    # In a process of its own: import-linter configures logging and would disable the loggers other tests read.
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"],
                          cwd=PACKAGE.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "KEPT" in proc.stdout and "BROKEN" not in proc.stdout


#: The Kubernetes API's writes (and the read between a decision and its write): only the actuator calls them. The Lease
#: writes (create_lease, replace_lease) are the one write outside that door, on purpose: the campaign
#: (adapters/leader.py) defines the fence, so it cannot sit behind it; LEASE_WRITES holds them to that one module.
WRITES = {"delete_pod", "evict_pod", "patch_pod_condition", "patch_node_taints", "create_config_map",
          "replace_config_map", "create_event", "read_pod_log"}
#: Where they are defined (the client) and the one module that calls them.
WRITERS = {"watchdog.adapters.kube", "watchdog.controller.actuator"}


LEASE_WRITES = {"create_lease", "replace_lease"}


def write_calls(path: Path, writes: set[str] = WRITES) -> list[str]:
    """``line: receiver.method`` for every call of one of the API's ``writes`` methods in ``path``, on anything."""
    return [f"{node.lineno}: {ast.unparse(node.func.value)}.{node.func.attr}"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in writes]


def test_only_the_actuator_calls_the_write_methods() -> None:
    """Issue 27: every side effect on the cluster goes through watchdog.controller.actuator (the leadership
    fence); everyone else asks it for what it wants done (apply a decided Removal or GateChange,
    save_config_map, ...)."""
    offenders = {module_name(p): calls for p in PACKAGE.rglob("*.py")
                 if module_name(p) not in WRITERS and not module_name(p).startswith("watchdog.demo")
                 and (calls := write_calls(p))}
    assert offenders == {}


def test_the_lease_writes_are_the_campaigns_alone() -> None:
    """The one write outside the actuator (docs/architecture.md says so): the Lease, by the leader election."""
    assert {module_name(p) for p in PACKAGE.rglob("*.py") if write_calls(p, LEASE_WRITES)} == {
        "watchdog.adapters.leader"}


def test_the_write_check_sees_a_write_outside_the_actuator(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f(self):\n    self.kube.delete_pod('ns', 'p', 'u', None)\n"
                      "    self.actuator.apply(Removal(pod, 'delete', None))\n")
    assert write_calls(sneaky) == ["2: self.kube.delete_pod"]


def removal_sends(path: Path) -> list[str]:
    """``line: call`` for every call in ``path`` that sends a removal: the actuator's ``remove``, on anything."""
    return [f"{node.lineno}: {ast.unparse(node.func)}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove"
            and ast.unparse(node.func.value).split(".")[-1] == "actuator"]


def test_one_call_site_sends_removals() -> None:
    """Issue 38: a removal is sent from one place in the controller (the remediator's ``_remove``: decided,
    verified, then settled from the outcome the actuator's one removal protocol returns), never from a second
    path that could skip the verification or the settling."""
    sends = {module_name(p): calls for p in PACKAGE.rglob("*.py") if (calls := removal_sends(p))}
    assert {name: len(calls) for name, calls in sends.items()} == {"watchdog.controller.remediator": 1}
    remediator = (PACKAGE / "controller" / "remediator.py").read_text()
    assert [f.name for f in ast.walk(ast.parse(remediator)) if isinstance(f, ast.FunctionDef)
            and "self.actuator.remove(" in ast.unparse(f)] == ["_remove"]


def test_the_removal_check_sees_a_second_send(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f(self):\n    self.items.remove(1)\n"
                      "    self.actuator.remove(Removal(pod, 'delete', None))\n")
    assert removal_sends(sneaky) == ["3: self.actuator.remove"]


#: The names leadership is read by: the elector's (``is_leader``, ``term``, ``holds_for``), the cycle's leader
#: callable (``leader``: the elector's ``term``) and the actuator's fence (``fence``: its ``holds_for``), and the
#: name an early look at the fence had (``may_write``).
LEADERSHIP = {"is_leader", "term", "holds_for", "leader", "fence", "may_write"}


def leadership_reads(path: Path) -> list[str]:
    """``line: call`` for every call in ``path`` of a function or method named one of :data:`LEADERSHIP`."""
    return [f"{node.lineno}: {ast.unparse(node.func)}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and (node.func.attr if isinstance(node.func, ast.Attribute)
                                               else getattr(node.func, "id", "")) in LEADERSHIP]


def test_leadership_is_read_once_per_cycle_and_fenced_in_the_actuator() -> None:
    """Issue 38: leadership is read in one place per cycle (cycle.py calls the leader callable and hands its answer
    on in CycleFacts); a Lease lost mid-cycle is the actuator's fence alone. The remediator and the readiness gate
    decide from the cycle's facts and never ask again; outside the elector itself nothing else reads it."""
    readers = {module_name(p): sorted({call.split(": ")[1] for call in calls}) for p in PACKAGE.rglob("*.py")
               if module_name(p) != "watchdog.adapters.leader" and not module_name(p).startswith("watchdog.demo")
               and (calls := leadership_reads(p))}
    assert readers == {"watchdog.controller.cycle": ["leader", "self.leader"],
                       "watchdog.controller.actuator": ["self.fence"]}


def test_the_leadership_check_sees_a_second_reader(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f(self, leader):\n    if self.actuator.may_write() and leader():\n        pass\n")
    assert leadership_reads(sneaky) == ["2: self.actuator.may_write", "2: leader"]


TESTS = Path(__file__).resolve().parent


def imported_test_modules(path: Path) -> list[str]:
    """``line: name`` for every ``test_*`` module (any dotted part) or name that ``path`` imports: ``import``,
    ``from ... import`` (relative too), ``importlib.import_module("...")`` and ``__import__("...")``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # `from tests.controller import test_cycle`, `from . import test_x`: the module is an imported name
            # (a test function imported by name would be collected twice too)
            names = [node.module or "", *(alias.name for alias in node.names)]
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        found += [f"{node.lineno}: {name}" for name in names
                  if any(part.startswith("test_") for part in name.split("."))]
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_no_test_module_imports_another_test_module() -> None:
    """A test module imported by another ties one file's tests to another's internals (and, imported as
    ``tests.controller.test_cycle``, is loaded a second time beside pytest's ``test_cycle``): shared helpers live in
    helper modules that are not test modules (tests/builders.py, tests/fakes.py, tests/*/*_kit.py)."""
    offenders = {str(p.relative_to(TESTS)): found for p in sorted(TESTS.rglob("*.py"))
                 if ".venv" not in p.parts and (found := imported_test_modules(p))}
    assert offenders == {}


def test_the_test_import_check_sees_each_form(tmp_path: Path) -> None:
    sneaky = tmp_path / "test_sneaky.py"
    sneaky.write_text("import test_a\nfrom test_b import x\nfrom tests.controller.test_c import y\n"
                      "from . import test_d\nimport importlib\nimportlib.import_module('test_e')\n"
                      "from tests.controller import test_f\nimport builders, testing_kit\nfrom fakes import Fake\n")
    assert imported_test_modules(sneaky) == ["1: test_a", "2: test_b", "3: tests.controller.test_c", "4: test_d",
                                             "6: test_e", "7: test_f"]


def test_modules_stay_unpacked() -> None:
    """One statement a line (size is no rule: complexity is, ruff C901/PLR0912/PLR0915 in pyproject.toml)."""
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().splitlines()
        packed = [i + 1 for i, line in enumerate(lines)
                  if not line.lstrip().startswith("#") and _statements(line) > 1]
        assert not packed, f"{path.relative_to(PACKAGE)}: several statements on line(s) {packed[:5]}"


def _statements(line: str) -> int:
    """Statements on one line: ``;`` outside strings, or a compound header with its body on the same line."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return 1
    if len(tree.body) > 1:
        return len(tree.body)
    node = tree.body[0] if tree.body else None
    return 2 if isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try) else 1


@pytest.mark.parametrize("verb", [["replay", "example:seed-incident"], ["check", "-"]])
def test_offline_verbs_never_import_kubernetes_or_apscheduler(verb: list[str]) -> None:
    code = ("import json, sys\nfrom watchdog.cli.main import main\nrc = main(sys.argv[1:])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'apscheduler', 'kmock'})\n"
            "print(json.dumps({'rc': rc, 'heavy': heavy}), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, *verb], input=b"vllm:num_requests_running 1\n",
                          capture_output=True, timeout=60)
    result = json.loads(proc.stderr.decode().strip().splitlines()[-1])
    assert result["rc"] in (0, 1)
    assert result["heavy"] == []
