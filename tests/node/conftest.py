"""Fixtures of the ``node`` tier: one real node per session (``node_kit.Node``: control plane, containerd, runc,
CNI, kubelet, kube-proxy inside a network namespace this session creates; the test process enters it), the
images built here and imported into containerd, and the chart installed with real helm so that the watchdog runs
as a Pod from the project's own image.

Without the binaries (``make node``) or the host packages every test of the tier is skipped with one reason;
with ``CI=true`` that is an error instead, so CI cannot pass by not running the tier.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # node_kit, images, node_world
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/tools.py

import images
import tools
from node_kit import Node, host_missing
from node_world import World

from watchdog.demo.controlplane.locate import NotAvailable, binary_dir

HERE = Path(__file__).resolve().parent
NODE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
SESSION: dict[str, Any] = {}


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the node tier needs root (network namespace, containerd, kubelet)"
    try:
        directory = binary_dir()
    except NotAvailable as exc:
        return str(exc)
    missing = [name for name in NODE_BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        return f"node not built ({', '.join(missing)} missing in {directory}): run `make node` (Go >= 1.25)"
    tools_missing = host_missing()
    if tools_missing:
        return (f"host packages missing ({', '.join(tools_missing)}): apt-get install containerd runc "
                "containernetworking-plugins iptables mmdebstrap umoci skopeo gcc")
    return None


UNAVAILABLE = _unavailable()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = any(HERE in Path(str(item.path)).resolve().parents for item in items)
    if UNAVAILABLE is not None and ours and os.environ.get("CI", "").lower() == "true":
        raise pytest.UsageError(f"CI=true and the node tier cannot run: {UNAVAILABLE}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if UNAVAILABLE is not None:
        pytest.skip(UNAVAILABLE)


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    work = tmp_path_factory.mktemp("node")
    t0 = time.monotonic()
    reuse = os.environ.get("NODE_TIER_REUSE_IMAGE") == "1" and os.environ.get("CI", "").lower() != "true"
    archive = images.fresh_archive(reuse)
    if archive is None or os.environ.get("NODE_TIER_REBUILD_IMAGE") == "1":
        archive, SESSION["image_build_s"] = images.build_watchdog_archive()
    SESSION["watchdog_archive"] = archive
    if reuse and archive != images.fresh_archive():
        SESSION["image_stale"] = True
    the_node = Node(binary_dir(), work)
    try:
        the_node.start()
        t1 = time.monotonic()
        SESSION["imports"] = [
            images.import_image(the_node.ctr, images.pause_archive(work)),
            images.import_image(the_node.ctr, archive, images.WATCHDOG_IMAGE.rsplit(":", 1)[0]),
            images.import_image(the_node.ctr, images.engine_archive(archive, work)),
        ]
        SESSION["import_s"] = time.monotonic() - t1
        the_node.start_node_agents()
        SESSION["node_ready_s"] = time.monotonic() - t0
        SESSION["node"] = the_node
        yield the_node
    finally:
        the_node.stop()


@pytest.fixture(scope="session")
def world(node: Node, tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(node, tools.kubectl(), tools.helm(), tmp_path_factory.mktemp("releases"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    if report.when == "call" and report.failed and "node" in SESSION:
        node: Node = SESSION["node"]
        report.sections.append(("node logs", node.log_report(20)))


@pytest.fixture
def scenario(world: World, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def make(name: str, **kw: Any) -> Any:
        made.append(world.scenario(name, **kw))
        return made[-1]
    yield make
    failed = getattr(request.node, "rep_call", None)
    for s in made:
        if failed is not None and failed.failed:
            print(f"\n===== watchdog {s.release} log =====\n{s.watchdog_log()[-4000:]}")
        s.cleanup()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "node" not in SESSION:
        return
    node: Node = SESSION["node"]
    write = terminalreporter.write_line
    write(f"node tier: node Ready in {SESSION['node_ready_s']:.1f} s (control plane + containerd "
          f"{node.timings.get('node_start_s', 0):.1f} s, image imports {SESSION['import_s']:.1f} s"
          + (f", watchdog image built in {SESSION['image_build_s']:.0f} s" if "image_build_s" in SESSION else "")
          + f"); watchdog image from {SESSION['watchdog_archive']}"
          + (" (NODE_TIER_REUSE_IMAGE=1: older than its inputs)" if SESSION.get("image_stale") else ""))
    for line in SESSION.get("watchdog_pods", []):
        write(f"node tier: {line}")
