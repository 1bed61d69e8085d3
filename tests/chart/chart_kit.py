"""What the chart tests (tests/chart/test_*.py) share: the chart's paths, the real helm and kubernetes-validate,
``helm template`` cached per argument list, and readers of the rendered objects (RBAC grants, Roles by purpose, the
ConfigMap as the watchdog reads it). Not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import tools
import yaml

from watchdog.config.loader import load_config

REPO = tools.REPO
CHART = REPO / "helm" / "vllm-stall-watchdog"
VALUES_DIR = Path(__file__).resolve().parent / "helm_values"
PRODUCTION = VALUES_DIR / "production.yaml"
RELEASE, NAMESPACE = "vsw", "vllm-stall-watchdog"


@cache
def helm_bin() -> str:
    try:
        return tools.helm()
    except tools.ToolMissing as exc:
        pytest.fail(str(exc))


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=120)


@cache
def template(*args: str) -> str:
    """``helm template`` output (cached per argument list); fails the test on a non-zero exit."""
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def template_fails(*args: str) -> str:
    """Run ``helm template`` expecting failure; return its stderr."""
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert done.returncode != 0, f"helm template {' '.join(args)} should have failed:\n{done.stdout[:2000]}"
    return done.stderr


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def one(text: str, kind: str) -> dict[str, Any]:
    found = [o for o in objects(text) if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """kubernetes-validate --strict against Kubernetes 1.29 and its newest known version."""
    from kubernetes_validate.utils import latest_version

    return subprocess.run(
        [tools.kubernetes_validate(), "--strict", "-k", "1.29.0", "-k", latest_version(), str(path)],
        capture_output=True, text=True, timeout=120,
    )


def lint_and_validate(values_file: str, rendered: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``helm lint --strict`` of the chart with ``values_file`` and kubernetes-validate of ``rendered`` (written to
    ``path``) both pass; the kubernetes-validate run, for what it checked."""
    lint = helm("lint", "--strict", str(CHART), "-f", values_file)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    path.write_text(rendered)
    done = validate(path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def roles_by_purpose(rendered: str, kind: str = "Role") -> dict[str, dict[str, Any]]:
    """Namespaced Roles (or RoleBindings) keyed by what they are for: "ledger", "brake", "node-events" or
    "leader-election"."""
    out = {}
    for o in objects(rendered):
        if o["kind"] == kind:
            name = o["metadata"]["name"]
            purposes = ("ledger", "brake", "node-events")
            out[next((p for p in purposes if name.endswith(f"-{p}")), "leader-election")] = o
    return out


def rbac_grants(role: dict[str, Any], names_allowed: bool = False) -> set[tuple[str, str, str, str]]:
    """Every (apiGroup, resource, verb, resourceName) the role grants; resourceNames only where allowed."""
    fields = {"apiGroups", "resources", "verbs"} | ({"resourceNames"} if names_allowed else set())
    grants = set()
    for rule in role["rules"]:
        assert set(rule) <= fields, f"unexpected rule fields (resourceNames? nonResourceURLs?): {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        grants.add((group, resource, verb, name))
    assert not [g for g in grants if any("*" in part for part in g)], "wildcards are never granted"
    return grants


def assert_grants(got: set[tuple[str, str, str, str]], want: set[tuple[str, str, str, str]]) -> None:
    assert got == want, f"extra: {sorted(got - want)}, missing: {sorted(want - got)}"


def config_from(rendered: str, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """The rendered ConfigMap's config.yaml as the watchdog loads it, and as plain YAML."""
    text = one(rendered, "ConfigMap")["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(file=str(path), env={}), yaml.safe_load(text)
