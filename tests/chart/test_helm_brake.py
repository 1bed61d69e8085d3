"""The chart's side of the run-time brake (RUNBOOK.md section 1), rendered with the real helm: the Deployment names
the release's own config ConfigMap in WATCHDOG_PAUSE_CONFIG_MAP, the watchdog reads that as pauseConfigMap, and a
Role lets the ServiceAccount `get` exactly that ConfigMap in the release namespace — nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chart_kit import (
    CHART,
    NAMESPACE,
    PRODUCTION,
    RELEASE,
    assert_grants,
    config_from,
    helm,
    objects,
    one,
    rbac_grants,
    roles_by_purpose,
    template,
)

VARIANTS = [
    pytest.param((), id="default"),
    pytest.param(("-f", str(PRODUCTION)), id="production"),
    pytest.param(("--set", "config.budgetLedger=false", "--set", "fullnameOverride=wd"), id="no-ledger-override"),
    pytest.param(("--set", "config.leaderElection=true", "--set", "replicaCount=2"), id="leader-election"),
]


def env_of(rendered: str) -> dict[str, Any]:
    (container,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("values", VARIANTS)
def test_the_brake_reads_the_releases_own_config_map_and_may_only_get_it(values: tuple[str, ...],
                                                                          tmp_path: Path) -> None:
    rendered = template(*values)
    config_map = one(rendered, "ConfigMap")["metadata"]["name"]
    pod = one(rendered, "Deployment")["spec"]["template"]["spec"]
    mounted = next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "config")
    assert env_of(rendered)["WATCHDOG_PAUSE_CONFIG_MAP"] == config_map == mounted

    role = roles_by_purpose(rendered)["brake"]
    binding = roles_by_purpose(rendered, "RoleBinding")["brake"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert_grants(rbac_grants(role, names_allowed=True), {("", "configmaps", "get", config_map)})
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    account = one(rendered, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]

    config, _ = config_from(rendered, tmp_path)
    assert config.pause_config_map is None  # not in the file: the env var brings it ...
    from watchdog.config.loader import load_config

    file = tmp_path / "config.yaml"  # written by config_from
    read = load_config(file=str(file), env={"WATCHDOG_PAUSE_CONFIG_MAP": config_map})
    assert read.pause_config_map == config_map  # ... and the watchdog accepts it as the brake's ConfigMap


def test_no_other_config_map_and_no_write_anywhere() -> None:
    """Across every Role of the default release, the only ConfigMap grants are the ledger's and the brake's get."""
    rendered = template()
    grants = set()
    for o in objects(rendered):
        if o["kind"] == "Role":
            grants |= rbac_grants(o, names_allowed=True)
    config_map = f"{RELEASE}-vllm-stall-watchdog"
    assert {g for g in grants if g[1] == "configmaps" and g[3] == config_map} == {
        ("", "configmaps", "get", config_map)}
    assert ("", "configmaps", "get", "") not in grants and ("", "configmaps", "list", "") not in grants


def test_notes_show_the_brake_and_status_for_this_release() -> None:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    config_map = f"{RELEASE}-vllm-stall-watchdog"
    assert (f"kubectl -n {NAMESPACE} annotate configmap {config_map} vllm-watchdog.io/paused=true --overwrite"
            in notes)
    assert f"kubectl -n {NAMESPACE} exec deploy/{config_map} -- python -m watchdog status" in notes
