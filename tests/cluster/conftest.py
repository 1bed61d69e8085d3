"""Fixtures of the ``cluster`` tier: one real control plane per session (etcd + kube-apiserver +
kube-controller-manager on loopback), a kubelet stand-in, chart releases installed with real helm, and the
watchdog process running as the chart's ServiceAccount: the kit in ``watchdog/demo/controlplane/`` that
``demo --control-plane real`` runs on too; cluster_kit.py holds what only the scenarios need.

Without built binaries (``make control-plane``) every test of the tier is skipped with one reason; with
``CI=true`` a missing control plane is an error instead, so CI cannot pass by not running the tier.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cluster_kit
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/tools.py

import tools
from cluster_kit import Scenario, scenario_env

from watchdog.demo.controlplane.api import free_port
from watchdog.demo.controlplane.chart import Release, WatchdogProcess, install_release
from watchdog.demo.controlplane.kubelet import FakeKubelet
from watchdog.demo.controlplane.locate import NotAvailable, binary_dir, missing_binaries
from watchdog.demo.controlplane.plane import ControlPlane, which_openssl

SESSION: dict[str, Any] = {}  # timings and facts for the terminal summary


def _unavailable() -> str | None:
    try:
        directory = binary_dir()
    except NotAvailable as exc:
        return str(exc)
    missing = missing_binaries(directory)
    if missing:
        return (f"control plane not built ({', '.join(missing)} missing in {directory}): run `make control-plane` "
                "(needs Go >= 1.25 and the Go module proxy; ~6 min cold)")
    if which_openssl() is None:
        return "openssl is not on PATH (the cluster tier makes the service-account key pair with it)"
    return None


UNAVAILABLE = _unavailable()
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(trylast=True)  # after `-m` deselection: only a run that selected the tier is stopped
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CI must not pass by not running the tier: with CI=true a missing control plane stops the run."""
    ours = any(HERE in Path(str(item.path)).resolve().parents for item in items)
    if UNAVAILABLE is not None and ours and os.environ.get("CI", "").lower() == "true":
        raise pytest.UsageError(f"CI=true and the cluster tier cannot run: {UNAVAILABLE}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Without the binaries, every test of the tier is skipped from here: one location, one reason, so the
    summary folds them into a single line."""
    if UNAVAILABLE is not None:
        pytest.skip(UNAVAILABLE)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(binary_dir(), tmp_path_factory.mktemp("control-plane"))
    plane.start()
    SESSION["control_plane_start_s"] = plane.start_seconds
    SESSION["audit_log"] = plane.audit_log
    SESSION["plane"] = plane
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def sim_port() -> int:
    """The one container port every simulated engine listens on (each pod on its own 127.10.x.y)."""
    return free_port()


@pytest.fixture(scope="session")
def kubelet(control_plane: ControlPlane) -> Iterator[FakeKubelet]:
    assert control_plane.api is not None
    stand_in = FakeKubelet(control_plane.api, nodes=("node-a", "node-b", "node-gpu"), schedulable=2).start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


@pytest.fixture(scope="session")
def helm() -> str:
    return tools.helm()


@pytest.fixture(scope="session")
def kubectl() -> str:
    return tools.kubectl()


@pytest.fixture(scope="session")
def release(control_plane: ControlPlane, helm: str, kubectl: str,
            tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Release]:
    """``release(name, **values)``: the chart installed once per (name) in namespace ``name``; cached."""
    cache: dict[str, Release] = {}
    work = tmp_path_factory.mktemp("releases")

    def get(name: str = "vllm-stall-watchdog", config: dict[str, Any] | None = None, **top: Any) -> Release:
        """``top``: chart values besides ``config`` (e.g. watchNamespaces)."""
        values = {**({"config": config} if config else {}), **top}
        if name not in cache:
            cache[name] = install_release(control_plane, helm, kubectl, name, name, values, work)
            SESSION.setdefault("grants", {})[cache[name].user] = granted_rules(control_plane, cache[name])
        assert cache[name].values == values, "one values set per release name"
        return cache[name]
    return get


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def scenario(request: pytest.FixtureRequest, control_plane: ControlPlane, kubelet: FakeKubelet,
             sim_port: int) -> Iterator[Callable[[str], Scenario]]:
    """``scenario(name)``: a :class:`Scenario` whose namespaces are deleted after the test."""
    made: list[Scenario] = []

    def make(name: str) -> Scenario:
        made.append(Scenario(control_plane, name, sim_port))
        return made[-1]
    yield make
    for s in made:
        s.cleanup()


@pytest.fixture
def watchdogs(request: pytest.FixtureRequest, control_plane: ControlPlane,
              tmp_path: Path) -> Iterator[Callable[..., WatchdogProcess]]:
    """``watchdogs(release, scenario_name, name="wd", env={...}, server=None)`` starts a watchdog process (stopped
    after the test; its log is printed when the test failed); ``server``: the URL its kubeconfig names instead of
    the API server's (the fault proxy)."""
    procs: list[WatchdogProcess] = []
    fresh: set[str] = set()

    def start(release: Release, scenario: str, name: str = "wd", env: dict[str, str] | None = None,
              server: str | None = None) -> WatchdogProcess:
        if release.namespace not in fresh:  # each test starts from an empty deletion ledger of its release:
            fresh.add(release.namespace)  # every entry of a release's own ledger counts, whatever namespace
            lease = (yaml.safe_load(release.config_yaml or "{}") or {}).get("leaseName", "vllm-stall-watchdog")
            assert control_plane.api is not None
            control_plane.api.delete(f"/api/v1/namespaces/{release.namespace}/configmaps/{lease}-ledger")
        proc = WatchdogProcess(control_plane, release, tmp_path, name, scenario_env(scenario, env))
        if server is not None:
            kubeconfig = yaml.safe_load(proc.kubeconfig.read_text())
            kubeconfig["clusters"][0]["cluster"]["server"] = server
            proc.kubeconfig.write_text(yaml.safe_dump(kubeconfig))
        procs.append(proc)
        return proc.start()
    yield start
    for proc in procs:
        proc.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for proc in procs:
            print(f"\n===== watchdog {proc.name} log (last 80 lines) =====")
            print("\n".join(proc.log().splitlines()[-80:]))
        print("\n===== control plane =====\n" + control_plane.log_report(15))


def granted_rules(plane: ControlPlane, release: Release) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) the release's ClusterRole and Roles grant its ServiceAccount."""
    assert plane.api is not None
    selector = f"app.kubernetes.io/instance={release.name}"
    roles = plane.api.get("/apis/rbac.authorization.k8s.io/v1/clusterroles", labelSelector=selector)["items"]
    roles += plane.api.get("/apis/rbac.authorization.k8s.io/v1/roles", labelSelector=selector)["items"]
    return {(group, resource, verb) for role in roles for rule in role.get("rules") or []
            for group in rule.get("apiGroups") or [] for resource in rule.get("resources") or []
            for verb in rule.get("verbs") or []}


def rbac_usage(audit_log: Path, grants: dict[str, set[tuple[str, str, str]]]) -> list[str]:
    """Per ServiceAccount: granted rules never exercised in this session, and requests the API refused (403)."""
    used: dict[str, set[tuple[str, str, str]]] = {user: set() for user in grants}
    denied: dict[str, set[tuple[str, str, str]]] = {user: set() for user in grants}
    for line in audit_log.read_text().splitlines() if audit_log.is_file() else []:
        event = json.loads(line)
        user, ref = event["user"].get("username"), event.get("objectRef") or {}
        if user not in grants or event.get("stage") != "ResponseComplete" or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (ref.get("apiGroup", ""), resource, event["verb"])
        (denied if event["responseStatus"]["code"] == 403 else used)[user].add(key)
    lines = []
    for user, granted in sorted(grants.items()):
        unused = sorted(granted - used[user])
        lines.append(f"  {user}: {len(granted) - len(unused)}/{len(granted)} grants used; never used: "
                     + (", ".join(f"{v} {g or 'core'}/{r}" for g, r, v in unused) or "none")
                     + ("; refused (403): " + ", ".join(f"{v} {g or 'core'}/{r}" for g, r, v in sorted(denied[user]))
                        if denied[user] else ""))
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "control_plane_start_s" in SESSION:
        terminalreporter.write_line(
            f"cluster tier: control plane (etcd + kube-apiserver + kube-controller-manager) started in "
            f"{SESSION['control_plane_start_s']:.1f} s at {time.strftime('%H:%M:%S')}")
    if SESSION.get("grants"):
        terminalreporter.write_line("cluster tier: RBAC grants of the chart exercised by the watchdog processes "
                                    "of this session (from the API server's audit log):")
        for line in rbac_usage(SESSION["audit_log"], SESSION["grants"]):
            terminalreporter.write_line(line)
