"""The cycle on the watch-based cache (what ``run`` wires): nothing before the first sync, then no LIST per cycle;
the emulator (kmock-based, not a cluster) serves the watches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from cycle_kit import NS, STEP, make_config

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.adapters.podcache import PodCache
from watchdog.controller.wiring import wire
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import pod_manifest, seed_deployment
from watchdog.demo.simpod import SimPod


class CountingScraper:
    def __init__(self) -> None:
        self.urls: list[str] = []

    def fetch(self, url: str) -> bytes:
        self.urls.append(url)
        raise AssertionError("no scrape before the first sync")

    def close(self) -> None:
        pass


def test_before_the_first_sync_a_cycle_scrapes_nothing_and_is_not_a_success(tmp_path: Path) -> None:
    kube = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:9", request_timeout_s=1))
    scraper = CountingScraper()
    now = [100.0]
    cache = PodCache(kube, first_sync_wait_s=0.2)
    wd = builders.watchdog(make_config(tmp_path), kube, scraper=scraper, clock=lambda: now[0], listing=cache)
    try:
        with pytest.raises(KubeError, match="cache not synced yet"):
            wd.run_cycle()
        assert scraper.urls == [] and wd.pods == {} and wd.last_success is None
        now[0] += 3600  # however long it lasts: the warm-up starts with the first complete cycle
        assert wd.policy.view(now[0])["warm_up"] == {"done": False, "left_s": wd.config.window_seconds}
    finally:
        wd.close()
    assert not any(i._thread and i._thread.is_alive() for i in cache.informers.values())


@pytest.fixture
def sim() -> Iterator[SimPod]:
    pod = SimPod("127.0.0.2", 0, "idle")
    pod.start()
    yield pod
    pod.stop()


def test_steady_cycles_send_no_request_and_a_new_pod_arrives_by_watch(emulator: EmulatorServer, sim: SimPod,
                                                                       tmp_path: Path) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    seed_deployment(emulator, NS, "one", sim.address, sim.port)
    kube = KubeClient.from_settings(KubeSettings(host=emulator.base_url, request_timeout_s=5))
    wd, _ = wire(make_config(tmp_path), kube, "default", cache=True)
    now = [0.0]
    wd.clock = lambda: now[0]

    def cycle() -> Any:
        now[0] += STEP
        return wd.run_cycle()

    try:
        first = cycle()
        assert first.pods == 1
        lists = emulator.emulator.count_requests(verb="list", resource="pods")
        assert lists == len({t.pod_selector for t in wd.config.targets})  # one LIST per informer, once
        assert [cycle().api_requests for _ in range(3)] == [0, 0, 0]
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "uid": "rs-uid"}}
        emulator.create_pod(pod_manifest(NS, "late", sim.address, sim.port, owner=owner))
        deadline = time.monotonic() + 5
        while (report := cycle()).pods != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert report.pods == 2 and report.api_requests == 0
        assert len(wd.pods) == 2
        assert emulator.emulator.count_requests(verb="list", resource="pods") == lists
        assert emulator.emulator.count_requests(verb="list", resource="namespaces") == 1
    finally:
        wd.close()
