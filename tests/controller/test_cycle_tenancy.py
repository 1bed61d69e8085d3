"""Issue 11 items 4, 6 and 9 at the cycle level (emulator + simulated pods + fake clock): vanished series are
forgotten and never blind the breaker, stall episodes follow the detector's clock across a failed scrape, and
one tenant's broken pods cannot hold back deletions in other namespaces."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from cycle_kit import NS, Rig, deleted_over, make_config, remediated
from metricsum import summed

from watchdog.adapters.scrape_errors import ScrapeError
from watchdog.controller.state import MAX_SERIES_PER_POD, PodRecord
from watchdog.controller.tallies import BreakerTallies
from watchdog.core.detector import DetectorState
from watchdog.core.model import NAMESPACE_LABEL, WatchedPod
from watchdog.core.vocab import NamespaceMode
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment


class ShapingScraper:
    """The real scraper, with test-controlled damage: drop lines matching ``drop`` for chosen hosts, or fail
    the next scrape of a host."""

    def __init__(self) -> None:
        self.inner = builders.scraper(builders.scrape_limits(connect_timeout_s=0.3, deadline_s=0.8))
        self.drop: dict[str, re.Pattern[bytes]] = {}
        self.fail_once: set[str] = set()

    def fetch(self, url: str) -> bytes:
        host = url.split("//", 1)[1].split(":", 1)[0]
        if host in self.fail_once:
            self.fail_once.discard(host)
            raise ScrapeError("timeout", "timeout after 0.8 s (injected)")
        body = self.inner.fetch(url)
        pattern = self.drop.get(host)
        return b"\n".join(line for line in body.split(b"\n") if not pattern or not pattern.search(line))

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    return emulator


@pytest.fixture
def shaped(api: EmulatorServer, tmp_path: Path) -> Iterator[tuple[Rig, ShapingScraper]]:
    scraper = ShapingScraper()
    rig = Rig(api, make_config(tmp_path), scraper=scraper)
    yield rig, scraper
    rig.close()


def test_vanished_engine_series_are_forgotten_and_do_not_hold_the_breaker(
        shaped: tuple[Rig, ShapingScraper]) -> None:
    """Item 4: three healthy pods lose DP engine "1" (a model unloaded); the wedged pod must still be deleted,
    and the lost series forgotten after a window (not `unknown` forever)."""
    rig, scraper = shaped
    healthy = [rig.sim(f"127.0.0.{i}", "progressing", engines=2) for i in (2, 3, 4)]
    for i, sim in enumerate(healthy):
        rig.deployment(f"ok{i}", sim)
    wedged = rig.deployment("wedged", rig.sim("127.0.0.5", "wedged"))
    rig.cycle()
    for sim in healthy:
        scraper.drop[sim.address] = re.compile(rb'engine="1"')
    deleted = []
    for _ in range(8):
        report = rig.cycle()
        deleted += [r for r in remediated(report) if r[1] == "deleted"]
    assert deleted == [(f"{NS}/{wedged['pod']['metadata']['name']}", "deleted")]
    assert rig.wd.metrics.registry.get_sample_value("vllm_watchdog_breaker_open") == 0
    for record in rig.wd.pods.values():
        assert all('engine="1"' not in key for key in record.engines), record.engines.keys()


def test_a_failed_scrape_does_not_end_the_stall_episode(api: EmulatorServer, tmp_path: Path) -> None:
    """Item 6: one wedge with a failed scrape in the middle is one episode: one stalls_total, one
    StalledPodDryRun Event per object (was two of each per gap)."""
    api.create_namespace("obs", {NAMESPACE_LABEL: "dry-run"})
    scraper = ShapingScraper()
    rig = Rig(api, make_config(tmp_path), scraper=scraper)
    try:
        sim = rig.sim("127.0.0.6", "wedged")
        seeded = seed_deployment(api, "obs", "llama", sim.address, sim.port)
        for cycle in range(10):
            if cycle in (5, 7):
                scraper.fail_once.add(sim.address)
            rig.cycle()
        assert summed(rig.wd.metrics.registry, "vllm_watchdog_stalls_total") == 1
        on_pod = [e for e in api.list_events("obs") if e["involvedObject"]["kind"] == "Pod"]
        assert [e["reason"] for e in on_pod] == ["StalledPodDryRun"]
        assert api.get_pod("obs", seeded["pod"]["metadata"]["name"]) is not None
    finally:
        rig.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_one_tenants_broken_pods_do_not_blind_other_namespaces(shaped: tuple[Rig, ShapingScraper],
                                                               api: EmulatorServer) -> None:
    """Item 9: three label-matching pods that serve no metrics (refused) in a tenant namespace used to open the
    fleet-wide breaker (3 of 6 pods "bad"); now they open only their own namespace's breaker."""
    rig, _ = shaped
    api.create_namespace("tenant", {NAMESPACE_LABEL: "true"})
    port = _closed_port()
    for i in range(3):
        seed_deployment(api, "tenant", f"mute{i}", f"127.0.0.{20 + i}", port)
    rig.deployment("a", rig.sim("127.0.0.7", "progressing"))
    rig.deployment("b", rig.sim("127.0.0.8", "idle"))
    wedged = rig.deployment("wedged", rig.sim("127.0.0.9", "wedged"))
    assert deleted_over(rig, 8) == [f"{NS}/{wedged['pod']['metadata']['name']}"]
    assert rig.wd.policy.decide(uid="x", series="s", namespace="tenant", namespace_mode="enforce", owner=None,
                                pod_age_s=1e6, now=rig.now).rule == "namespace_breaker"


def _pod(namespace: str, mode: NamespaceMode = "enforce", tenant: str = "") -> WatchedPod:
    return WatchedPod(uid="u", namespace=namespace, name="p", ip="10.0.0.1", port=8000, path="/metrics",
                      target_name="vllm", profile="vllm", mode=mode, restart_count=0, owner=None, tenant=tenant)


def test_pod_health_counts_unknowns_only_in_their_namespace() -> None:
    h = BreakerTallies()
    for _ in range(3):
        h.add(_pod("tenant"), scraped=False, present=set())
    h.add(_pod("tenant"), scraped=True, present={"unknown"})
    h.add(_pod("ml"), scraped=True, present={"stalled", "progressing"})
    h.add(_pod("ml"), scraped=True, present={"idle"})
    assert (h.watched, h.stalled) == (6, 1)
    assert h.by_namespace == {"tenant": (4, 4), "ml": (2, 1)}


def test_the_fleet_tally_counts_enforced_pods_per_tenant() -> None:
    """Issue 36 item 5: dry-run pods count only in their namespace's tally; enforced pods of one tenant's two
    namespaces are one entry of the fleet's spread."""
    h = BreakerTallies()
    for namespace in ("x-dev", "x-stage"):
        h.add(_pod(namespace, tenant="t=x"), scraped=True, present={"stalled"})
        h.add(_pod(f"{namespace}-try", "dry-run", tenant="t=x"), scraped=True, present={"stalled"})
    h.add(_pod("team-a"), scraped=True, present={"stalled"})
    assert (h.watched, h.stalled) == (3, 3)
    assert h.spread == {"t=x": (2, 2), "team-a": (1, 1)}
    assert h.by_namespace["x-dev-try"] == (1, 1)


def test_a_pod_keeps_a_bounded_number_of_series() -> None:
    record = PodRecord(restart_count=0, first_seen=0.0)
    for i in range(MAX_SERIES_PER_POD + 10):
        record.engines[f"model_name=m{i}"] = _engine(float(i))
    assert record.cap_series() == 10
    assert len(record.engines) == MAX_SERIES_PER_POD and "model_name=m0" not in record.engines


def _engine(last_seen: float) -> Any:
    from watchdog.controller.state import EngineRecord

    return EngineRecord(DetectorState(5.0), last_seen=last_seen)


def test_a_body_over_the_parse_bounds_is_unknown_and_a_label_storm_is_capped(
        shaped: tuple[Rig, ShapingScraper]) -> None:
    """Issue 11 items 7 and 8 at the cycle: an overrun is a `parse` scrape outcome (unknown, no partial
    evidence); a pod exporting a new model_name on every scrape keeps at most the cap of series, counted."""
    rig, scraper = shaped
    flood = rig.sim("127.0.0.11", "progressing")
    rig.deployment("flood", flood)
    real_fetch = scraper.inner.fetch
    calls = {"n": 0}

    def storm(url: str) -> bytes:
        calls["n"] += 1
        lines = [f'vllm:num_requests_running{{engine="0",model_name="m{calls["n"]}-{i}"}} 1' for i in range(70)]
        return "\n".join(lines).encode() + b"\n" + real_fetch(url)

    scraper.inner.fetch = storm  # type: ignore[method-assign]
    for _ in range(4):
        rig.cycle()
    [record] = rig.wd.pods.values()
    assert len(record.engines) <= 64
    assert (rig.wd.metrics.registry.get_sample_value("vllm_watchdog_series_dropped_total") or 0) > 0

    garbage = b'vllm:num_requests_running{x="\\q"} 1 2 3 junk\n' * 300_000  # near-miss lines, 9 MB
    scraper.inner.fetch = lambda url: garbage  # type: ignore[method-assign]
    report = rig.cycle()
    assert report.scrapes == {"parse": 1}
    assert {v.state for _ref, _key, v in report.verdicts} == {"unknown"}
