"""Fixtures of the ``node`` tier: one real node per session (``watchdog.demo.node.kit.Node``: control plane,
containerd, runc, CNI, kubelet, kube-proxy inside a network namespace this session creates; the test process
enters it), the images built here and imported into containerd, and the chart installed with real helm so that
the watchdog runs as a Pod from the project's own image.

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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # images, node_world
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/tools.py

import images
import tools
from node_world import World

from watchdog.demo.controlplane.locate import binary_dir
from watchdog.demo.node import images as node_images
from watchdog.demo.node.kit import Node, unavailable

HERE = Path(__file__).resolve().parent
SESSION: dict[str, Any] = {}


def _unavailable() -> str | None:
    reason = unavailable()
    return None if reason is None else f"the node tier cannot run: {reason}"


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
    archive = node_images.watchdog_archive(fresh_only=not reuse)
    if archive is None or os.environ.get("NODE_TIER_REBUILD_IMAGE") == "1":
        archive, SESSION["image_build_s"] = images.build_watchdog_archive()
    SESSION["watchdog_archive"] = archive
    if reuse and archive != node_images.watchdog_archive():
        SESSION["image_stale"] = True
    the_node = Node(binary_dir(), work)
    try:
        the_node.start()
        t1 = time.monotonic()
        SESSION["imports"] = [
            node_images.import_image(the_node.ctr, node_images.pause_archive(work)),
            node_images.import_watchdog_image(the_node.ctr, archive),
            node_images.import_image(the_node.ctr, node_images.engine_archive(archive, work)),
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
