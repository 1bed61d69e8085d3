"""Fault tests for the safety rails, in process: real Watchdog cycles over real HTTP against the Kubernetes API
emulator (kmock-based; not a cluster) and simulated vLLM pods, with a fake monotonic clock (15 s per cycle).

Every test asserts the expected outcome and that nothing was wrongly deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from fakes import FakeKube
from metricsum import summed

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.adapters.leader import LeaderElector
from watchdog.config.loader import load_config
from watchdog.config.settings import Settings
from watchdog.controller.cycle import CycleReport, Watchdog
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, pod_manifest, write_config
from watchdog.demo.simpod import Rates, SimPod
from watchdog.demo.simpod.server import SimServer

STEP = 15.0
FAST = Rates(prompt_tokens=1e7, generation_tokens=1e6, steps=1e5)
# Window 45 s = 3 cycles of the fake clock; pods are seconds old on the wall clock, so the minimum age is the
# monotonic time the watchdog has watched them (pod_age_s takes the larger of the two).
BASE = {**FAST_SETTINGS, "windowSeconds": 45.0, "scrapeIntervalSeconds": 15.0, "scrapeDeadlineSeconds": 10.0,
        "connectTimeoutSeconds": 5.0}  # generous: a loaded CI machine must not turn scrapes into unknowns


class Fleet:
    """Pods in the emulator pointing at a few shared simulated engines; a Watchdog per call of :meth:`watchdog`."""

    def __init__(self, api: EmulatorServer, tmp: Path) -> None:
        self.api, self.tmp, self.now = api, tmp, 0.0
        self.engines = {mode: SimPod(f"127.0.0.{i + 2}", 0, mode, rates=FAST)
                        for i, mode in enumerate(("progressing", "wedged", "idle"))}
        for sim in self.engines.values():
            sim.start()
        self.pods: dict[str, dict[str, Any]] = {}
        self.namespaces: set[str] = set()

    def namespace(self, name: str, opt_in: str = "true", **labels: str) -> None:
        self.api.create_namespace(name, {NAMESPACE_LABEL: opt_in, **labels})
        self.namespaces.add(name)

    def pod(self, name: str, mode: str, namespace: str = "llm") -> dict[str, Any]:
        if namespace not in self.namespaces:
            self.namespace(namespace)
        owner = self.api.create_object(f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": f"{name}-rs"}})
        sim = self.engines[mode]
        self.pods[name] = self.api.create_pod(pod_manifest(namespace, name, sim.address, sim.port, owner=owner))
        return self.pods[name]

    def config(self, **overrides: Any) -> Settings:
        return load_config(str(write_config(self.tmp / "config.yaml", **{**BASE, **overrides})), env={})

    def watchdog(self, kube: Any = None, **kw: Any) -> Watchdog:
        kube = kube or KubeClient.from_settings(KubeSettings(host=self.api.base_url, request_timeout_s=5))
        return builders.watchdog(kw.pop("config", None) or self.config(), kube, clock=lambda: self.now, **kw)

    def alive(self, name: str) -> bool:
        meta = self.pods[name]["metadata"]
        stored = self.api.get_pod(meta["namespace"], meta["name"])
        return stored is not None and stored["metadata"]["uid"] == meta["uid"]

    def events(self, reason: str) -> list[tuple[str, str]]:
        return sorted((e["involvedObject"]["name"], e["message"]) for e in self.api.list_events()
                      if e["reason"] == reason and e["involvedObject"]["kind"] == "Pod")

    def close(self) -> None:
        for sim in self.engines.values():
            sim.stop()


@pytest.fixture
def fleet(emulator: EmulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    # Up to 40 pods share one simulated engine and are scraped at once: with socketserver's listen backlog of 5 the
    # kernel drops the surplus connection attempts and each one waits out a 1 s SYN retransmit (14 s for 8 cycles).
    # A real engine's server (uvicorn) listens with a backlog of 2048.
    monkeypatch.setattr(SimServer, "request_queue_size", 2048)
    f = Fleet(emulator, tmp_path)
    yield f
    f.close()


def run(fleet: Fleet, wd: Watchdog, cycles: int, before: Callable[[int], None] | None = None) -> list[CycleReport]:
    reports = []
    for i in range(cycles):
        fleet.now += STEP
        if before is not None:
            before(i)
        try:
            reports.append(wd.run_cycle())
        except KubeError:
            reports.append(CycleReport())
    return reports


def results(reports: list[CycleReport]) -> list[str]:
    return [r.result for report in reports for _, r in report.remediations]


def test_breaker_trips_when_30_percent_stall_together_and_nothing_is_deleted(fleet: Fleet) -> None:
    for i in range(7):
        fleet.pod(f"ok-{i}", "progressing")
    for i in range(4):  # 4 of 11 = 36%, but with one of their namespaces left out 3 of 10 = 30%: not MORE ...
        fleet.pod(f"wedged-{i}", "wedged", namespace=f"team-{i}")
    fleet.pod("wedged-4", "wedged", namespace="team-4")  # ... 5 of 12, and 4 of 11 = 36% without any one: trips
    wd = fleet.watchdog()
    reports = run(fleet, wd, 8)
    assert set(results(reports)) == {"deferred"}
    assert all(fleet.alive(name) for name in fleet.pods)
    deferred = fleet.events("StalledPodDeletionDeferred")
    assert len(deferred) == 5 and all("mass-stall breaker is open" in msg for _, msg in deferred)
    assert wd.metrics.registry.get_sample_value("vllm_watchdog_breaker_open") == 1.0
    assert summed(wd.metrics.registry, "vllm_watchdog_deferrals_total", {"rule": "breaker"}) >= 5


@pytest.mark.parametrize("tenant_mode", ["dry-run", "true"])
def test_one_tenants_fake_stalls_never_hold_back_another_namespaces_wedge(fleet: Fleet, tenant_mode: str) -> None:
    """Issue 27 item 5: three pods of one tenant serving a static "busy and frozen" exposition (its namespace in
    dry-run or enforced) and one real wedge elsewhere: "4 of 7 watched pods looked stalled" opened the fleet
    breaker and deferred the wedge for as long as the tenant kept its pods. The fleet breaker now needs its
    thresholds met with any one namespace left out; the tenant's own breaker holds its own pods only."""
    fleet.api.create_namespace("tenant", {NAMESPACE_LABEL: tenant_mode})
    fleet.namespaces.add("tenant")
    for i in range(3):
        fleet.pod(f"fake-{i}", "wedged", namespace="tenant")
    for i in range(3):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged")  # enforced namespace llm
    wd = fleet.watchdog()
    run(fleet, wd, 8)
    assert not fleet.alive("wedged")
    assert all(fleet.alive(f"fake-{i}") for i in range(3)) and all(fleet.alive(f"ok-{i}") for i in range(3))
    registry = wd.metrics.registry
    assert registry.get_sample_value("vllm_watchdog_breaker_open") == 0.0
    assert not summed(registry, "vllm_watchdog_deferrals_total", {"rule": "breaker"})
    fakes = {fleet.pods[f"fake-{i}"]["metadata"]["name"] for i in range(3)}
    if tenant_mode == "dry-run":
        assert {name for name, _ in fleet.events("StalledPodDryRun")} == fakes
    else:  # its own breaker (3 of its 3 pods) holds its own pods back
        deferred = fleet.events("StalledPodDeletionDeferred")
        assert {name for name, _ in deferred} == fakes and all("namespace tenant" in m for _, m in deferred)


TENANT = "capsule.clastix.io/tenant"


def test_a_tenants_dry_run_namespaces_never_vote_in_the_fleet_breaker(fleet: Fleet) -> None:
    """Issue 36 item 5: 16 fake-wedged pods (a static frozen-busy exposition) split over TWO dry-run namespaces of
    one tenant opened the fleet breaker ("17 of 37 ... with any one namespace left out": 9 of 29 without either)
    and team-a's real wedge was deferred `breaker` for the whole run. Pods the watchdog may not remove (dry-run
    namespaces) do not vote: 1 of 21, the wedge is deleted, the fakes are only announced."""
    for ns in ("x-dev", "x-stage"):
        fleet.namespace(ns, "dry-run")
        for i in range(8):
            fleet.pod(f"fake-{ns}-{i}", "wedged", namespace=ns)
    for i in range(20):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged", namespace="team-a")
    wd = fleet.watchdog()
    reports = run(fleet, wd, 8)
    assert not fleet.alive("wedged") and results(reports).count("deleted") == 1
    assert all(fleet.alive(name) for name in fleet.pods if name != "wedged")
    assert wd.metrics.registry.get_sample_value("vllm_watchdog_breaker_open") == 0.0
    assert not summed(wd.metrics.registry, "vllm_watchdog_deferrals_total", {"rule": "breaker"})
    assert len(fleet.events("StalledPodDryRun")) == 16


@pytest.mark.parametrize("tenant_label", [TENANT, ""])
def test_one_tenants_enforced_namespaces_count_as_one_in_the_fleet_breaker(fleet: Fleet, tenant_label: str) -> None:
    """Issue 36 item 5, enforced: the same 16 fake-wedged pods in two ENFORCED namespaces that the cluster admin
    labelled as one tenant. With tenantLabel set they are one voter: 17 of 37, but 1 of 21 without tenant x, so
    the breaker stays shut and team-a's wedge is deleted (x's own namespace breakers hold x's pods). Without
    tenantLabel each namespace is a tenant of its own, and two of them are a storm (9 of 29 without either)."""
    for ns in ("x-dev", "x-stage"):
        fleet.namespace(ns, **{TENANT: "x"})
        for i in range(8):
            fleet.pod(f"fake-{ns}-{i}", "wedged", namespace=ns)
    for i in range(20):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged", namespace="team-a")
    wd = fleet.watchdog(config=fleet.config(tenantLabel=tenant_label))
    run(fleet, wd, 8)
    assert all(fleet.alive(name) for name in fleet.pods if name != "wedged")
    registry = wd.metrics.registry
    if tenant_label:
        assert not fleet.alive("wedged")
        assert registry.get_sample_value("vllm_watchdog_breaker_open") == 0.0
        assert not summed(registry, "vllm_watchdog_deferrals_total", {"rule": "breaker"})
        assert set(wd.policy.view(fleet.now)["breaker"]["namespaces"]) == {"x-dev", "x-stage"}
    else:
        assert fleet.alive("wedged")
        assert wd.policy.view(fleet.now)["breaker"]["why"] == (
            "17 of 37 enforced pods looked stalled, in 3 tenants (over the thresholds with any one of them left out)")


def test_a_storm_across_namespaces_still_opens_the_fleet_breaker(fleet: Fleet) -> None:
    """The storm protection stays: two stalled pods in each of four namespaces (a sticking gauge of one engine
    version) beside a healthy one: 8 of 13, and 6 of 11 with any one of them left out."""
    for i in range(5):
        fleet.pod(f"ok-{i}", "progressing")
    for i in range(4):
        for j in range(2):
            fleet.pod(f"wedged-{i}-{j}", "wedged", namespace=f"team-{i}")
    wd = fleet.watchdog()
    reports = run(fleet, wd, 8)
    assert set(results(reports)) == {"deferred"} and all(fleet.alive(name) for name in fleet.pods)
    assert wd.metrics.registry.get_sample_value("vllm_watchdog_breaker_open") == 1.0
    assert wd.policy.view(fleet.now)["breaker"]["why"] == (
        "8 of 13 enforced pods looked stalled, in 4 tenants (over the thresholds with any one of them left out)")


def test_breaker_closes_after_cooldown_once_the_fraction_drops(fleet: Fleet) -> None:
    for i in range(6):
        fleet.pod(f"ok-{i}", "progressing")
    for i in range(4):
        fleet.pod(f"wedged-{i}", "wedged", namespace=f"team-{i}")
    wd = fleet.watchdog(config=fleet.config(breakerCooldownSeconds=60, maxDeletions=1))
    run(fleet, wd, 5)
    assert all(fleet.alive(name) for name in fleet.pods)
    for i in range(3):  # three recover (here: their pods vanish), one stays wedged: 1 of 7 is below 30%
        meta = fleet.pods[f"wedged-{i}"]["metadata"]
        fleet.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
    later = run(fleet, wd, 6)
    assert results(later).count("deleted") == 1 and not fleet.alive("wedged-3")
    assert wd.metrics.registry.get_sample_value("vllm_watchdog_breaker_open") == 0.0


def test_ten_genuine_stalls_only_the_budgeted_ones_are_deleted(fleet: Fleet) -> None:
    for i in range(30):
        fleet.pod(f"ok-{i}", "progressing")
    for i in range(10):  # 10 of 40 = 25%: below the breaker; one per namespace
        fleet.pod(f"wedged-{i}", "wedged", namespace=f"team-{i}")
    wd = fleet.watchdog()
    reports = run(fleet, wd, 8)
    deleted = [name for name in fleet.pods if not fleet.alive(name)]
    assert len(deleted) == 2 and all(name.startswith("wedged-") for name in deleted)  # default budget: 2 / 10 min
    assert results(reports).count("deleted") == 2
    deferred = fleet.events("StalledPodDeletionDeferred")
    assert {name for name, _ in deferred} == {f"wedged-{i}" for i in range(10)} - set(deleted)
    assert all("cluster budget used: 2 deletions" in msg for _, msg in deferred)
    assert len(deferred) == 8  # one Event per stall episode and rule, never one per cycle


def test_a_freed_budget_slot_goes_to_the_wedge_held_longest(fleet: Fleet) -> None:
    """A tenant whose pods keep wedging must not win every slot the cluster budget frees: team-zz's wedge, held
    since before the noisy tenant's newer one stalled, goes first. In listing order (the old way) the freed slot
    went to the noisy pod, listed first (created first; its namespace opted in only later)."""
    for i in range(12):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("first", "wedged", namespace="aa-first")
    fleet.namespace("aa-noisy", opt_in="false")
    fleet.pod("noisy", "wedged", namespace="aa-noisy")
    fleet.pod("held", "wedged", namespace="team-zz")
    wd = fleet.watchdog(config=fleet.config(maxDeletions=1, deletionWindowSeconds=90))

    def noisy(i: int) -> None:
        if i == 3:  # the noisy tenant's wedge is watched from now on, after team-zz's was first held
            fleet.api.patch_object("/api/v1/namespaces/aa-noisy", {"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})
    reports = run(fleet, wd, 14, noisy)
    deleted = [ref for report in reports for ref, r in report.remediations if r.result == "deleted"]
    assert deleted == ["aa-first/first", "team-zz/held"] and fleet.alive("noisy")


def test_namespace_budget_and_owner_rule(fleet: Fleet) -> None:
    for i in range(8):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("a", "wedged", namespace="team")
    fleet.pod("b", "wedged", namespace="team")
    wd = fleet.watchdog()
    run(fleet, wd, 6)
    assert [fleet.alive("a"), fleet.alive("b")].count(False) == 1
    [(_, msg)] = fleet.events("StalledPodDeletionDeferred")
    assert "namespace budget used" in msg


def test_a_held_stall_says_when_its_namespace_budget_frees_and_counts_once(fleet: Fleet) -> None:
    """Issue 30 items 2 and 3 through real cycles: the deferral Event says when the namespace budget frees (600 s
    after the deletion that used it, as a wall time on the watchdog's wall clock), /status shows the same rule
    and the seconds left as of its snapshot, and the stall held for every later cycle is one deferred
    remediation."""
    for i in range(8):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("a", "wedged", namespace="team")
    fleet.pod("b", "wedged", namespace="team")
    wall0 = 1_796_101_200.0  # 2026-12-01T05:00:00Z
    wd = fleet.watchdog(wall_clock=lambda: wall0 + fleet.now)
    reports = run(fleet, wd, 10)
    [at] = [(i + 1) * STEP for i, report in enumerate(reports) for _, r in report.remediations
            if r.result == "deleted"]
    [kept] = [name for name in ("a", "b") if fleet.alive(name)]
    deferred = [(i + 1) * STEP for i, report in enumerate(reports) for _, r in report.remediations
                if r.result == "deferred"]
    assert len(deferred) >= 5 and deferred[0] == at  # held from the deletion's cycle on, every cycle
    frees_in = at + 600.0 - deferred[0]
    [(name, msg)] = fleet.events("StalledPodDeletionDeferred")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall0 + at + 600.0))
    assert name == kept and msg.endswith(
        f"namespace budget used: 1 deletions in team in the last 600 s; may proceed in {frees_in:.0f} s (at {stamp}), "
        "when the oldest counted deletion in team leaves the rolling 600 s window.")
    assert wd.status is not None
    [engine] = next(p for p in wd.status.doc["pods"] if p["pod"] == kept)["engines"]
    assert engine["held"] == {"rule": "namespace_budget", "frees_in_s": at + 600.0 - fleet.now,
                              "frees_when": "when the oldest counted deletion in team leaves the rolling 600 s window"}
    assert wd.status.doc["policy"]["budget"]["frees_in_s"]["namespaces"] == {"team": at + 600.0 - fleet.now}
    def sample(name: str, labels: dict[str, str]) -> float | None:
        return summed(wd.metrics.registry, name, labels)

    assert sample("vllm_watchdog_remediations_total", {"result": "deferred"}) == 1.0  # not once per cycle
    assert sample("vllm_watchdog_deferrals_total", {"rule": "namespace_budget"}) == 1.0


def test_429_storm_at_start_up_never_causes_a_deletion(fleet: Fleet) -> None:
    for i in range(3):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged")
    kube = FakeKube(KubeClient.from_settings(KubeSettings(host=fleet.api.base_url)))
    kube.fail["list_pods"] = KubeError("list pods", 429, "Too Many Requests")
    wd = fleet.watchdog(kube)

    def api_recovers(i: int) -> None:
        if i == 4:
            kube.fail.clear()

    reports = run(fleet, wd, 10, api_recovers)
    assert all(not r.remediations for r in reports[:4])
    first_deletion = next(i for i, r in enumerate(reports) if results([r]) == ["deleted"])
    # First listing at cycle 4; the detector and the warm-up then each need a full 45 s window (3 cycles).
    assert first_deletion >= 4 + 3
    assert [n for n in fleet.pods if not fleet.alive(n)] == ["wedged"]


@pytest.mark.parametrize("jump_s", [3600.0, -3600.0])
def test_wall_clock_jumps_do_not_move_the_windows(fleet: Fleet, jump_s: float) -> None:
    for i in range(3):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged")
    offset = [0.0]
    wd = fleet.watchdog(wall_clock=lambda: time.time() + offset[0])

    def jump(i: int) -> None:
        if i == 1:
            offset[0] = jump_s

    reports = run(fleet, wd, 6, jump)
    states = [{ref.split("/")[1]: v.state for ref, _, v in r.verdicts}.get("wedged") for r in reports]
    # Stalled exactly a 45 s window after the first busy sample, whatever the wall clock does.
    assert states[:4] == ["suspect", "suspect", "suspect", "stalled"]
    assert results(reports) == ["deleted"] and not fleet.alive("wedged")
    assert all(fleet.alive(f"ok-{i}") for i in range(3))


def test_pause_defers_everything(fleet: Fleet) -> None:
    for i in range(4):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged")
    wd = fleet.watchdog(config=fleet.config(paused=True))
    assert set(results(run(fleet, wd, 6))) == {"deferred"} and fleet.alive("wedged")
    [(_, msg)] = fleet.events("StalledPodDeletionDeferred")
    assert "paused" in msg


def test_two_replicas_with_leader_election_exactly_one_acts(fleet: Fleet) -> None:
    for i in range(6):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged-a", "wedged", namespace="team-a")
    fleet.api.create_namespace("watchdog-system")
    replicas = []
    for name in ("replica-a", "replica-b"):
        kube = KubeClient.from_settings(KubeSettings(host=fleet.api.base_url))
        elector = LeaderElector(kube, "watchdog-system", fleet.config().lease_name, identity=name)
        replicas.append((fleet.watchdog(kube, leader=elector.is_leader), elector))
    (wd_a, el_a), (wd_b, el_b) = replicas
    el_a.step()  # replica A campaigns first and wins
    for _ in range(6):
        fleet.now += STEP
        for wd, elector in reversed(replicas):  # the standby looks first each time: it must hold back
            elector.step()
            wd.run_cycle()
    assert el_a.is_leader() and not el_b.is_leader()
    reg = (wd_a.metrics.registry, wd_b.metrics.registry)
    assert [summed(r, "vllm_watchdog_remediations_total", {"result": "deleted"}) for r in reg] == [1.0, 0.0]
    assert summed(reg[1], "vllm_watchdog_deferrals_total", {"rule": "not_leader"}) >= 1
    assert not fleet.alive("wedged-a")

    # The leader steps down (releases the Lease): the standby takes over and acts on the next stall.
    el_a.stop()
    fleet.pod("wedged-b", "wedged", namespace="team-b")
    for _ in range(6):
        fleet.now += STEP
        for wd, elector in replicas:
            if elector is not el_a:
                elector.step()
            wd.run_cycle()
    assert el_b.is_leader() and not fleet.alive("wedged-b")
    assert summed(reg[0], "vllm_watchdog_remediations_total", {"result": "deleted"}) == 1.0
    assert summed(reg[1], "vllm_watchdog_remediations_total", {"result": "deleted"}) == 1.0
    # The standby never wrote to the cluster: no deferral Events for "not the leader".
    assert not [m for _, m in fleet.events("StalledPodDeletionDeferred") if "Lease" in m]

    # B read A's deletion back when it became leader: with B's own, the budget of 2 is used up.
    fleet.pod("wedged-c", "wedged", namespace="team-c")
    for _ in range(5):
        fleet.now += STEP
        el_b.step()
        wd_b.run_cycle()
    assert fleet.alive("wedged-c")
    [(_, msg)] = fleet.events("StalledPodDeletionDeferred")
    assert "cluster budget used: 2 deletions" in msg


def test_a_standby_neither_announces_nor_keeps_evidence_of_a_dry_run_stall(fleet: Fleet,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Issue 27 item 6: the dry-run decision came before the not-leader rule, so a standby wrote its own
    StalledPodDryRun Events (two per stall with the leader's), logged an evidence record and read pods/log."""
    fleet.api.create_namespace("obs", {NAMESPACE_LABEL: "dry-run"})
    fleet.namespaces.add("obs")
    for i in range(3):
        fleet.pod(f"ok-{i}", "progressing")
    pod = fleet.pod("wedged", "wedged", namespace="obs")
    kube = FakeKube(KubeClient.from_settings(KubeSettings(host=fleet.api.base_url)),
                    read_pod_log=lambda *_: b"engine log line\n")
    config = fleet.config(evidenceLogLines=20)
    standby = fleet.watchdog(kube, config=config, leader=lambda: False)

    def evidence() -> int:
        return sum(1 for r in caplog.records if r.name == "watchdog.controller.evidence")

    with caplog.at_level(logging.INFO):
        reports = run(fleet, standby, 6)
        assert {(r.result, r.rule) for report in reports for _, r in report.remediations} == {
            ("deferred", "not_leader")}
        assert fleet.api.list_events() == [] and kube.calls["read_pod_log"] == 0 and evidence() == 0
        # The leader speaks for the stall: one Event on the pod, one evidence record, one log read.
        run(fleet, fleet.watchdog(kube, config=config), 6)
        assert [name for name, _ in fleet.events("StalledPodDryRun")] == [pod["metadata"]["name"]]
        assert kube.calls["read_pod_log"] == 1 and evidence() == 1
    assert fleet.alive("wedged")


def test_a_lease_won_mid_cycle_acts_only_after_the_ledger_was_read_back(fleet: Fleet) -> None:
    """Fresh-eyes finding: a standby read the (then empty) ledger once; it won the Lease between its cycle's
    start and its remediations and removed two more pods at once on that old budget (4 in 2 min, budget 2)."""
    for i in range(6):
        fleet.pod(f"ok-{i}", "progressing")
    for name in ("c", "d"):
        fleet.pod(f"wedged-{name}", "wedged", namespace=f"team-{name}")
    held = [False]
    standby = fleet.watchdog(leader=lambda: held[0])
    run(fleet, standby, 8)  # its budget is "known" (the ledger read back empty); c and d stalled, not_leader
    assert standby.policy.budget_known and fleet.alive("wedged-c") and fleet.alive("wedged-d")
    # Meanwhile the leader removed two pods (its write-ahead records in the shared ledger), then lost the Lease.
    fleet.api.create_namespace("default")
    now = time.time()
    entries = [{"t": now - 60, "namespace": f"team-{n}", "pod": n, "uid": f"uid-{n}"} for n in ("a", "b")]
    fleet.api.create_object("/api/v1/namespaces/default/configmaps", {
        "metadata": {"name": "vllm-stall-watchdog-ledger"}, "data": {"deletions": json.dumps(entries)}})
    asked = [0]

    def wins_mid_cycle() -> bool:  # False when the cycle reads it at its start, True from then on
        asked[0] += 1
        held[0] = held[0] or asked[0] > 1
        return held[0]

    standby.leader = wins_mid_cycle  # the cycle reads it once, at its start: the one reading of leadership
    run(fleet, standby, 3)
    assert fleet.alive("wedged-c") and fleet.alive("wedged-d")
    assert any("cluster budget used: 2 deletions" in msg for _, msg in fleet.events("StalledPodDeletionDeferred"))


def test_eviction_mode_defers_on_a_pdb_and_never_falls_back_to_delete(fleet: Fleet) -> None:
    for i in range(4):
        fleet.pod(f"ok-{i}", "progressing")
    pod = fleet.pod("wedged", "wedged")
    fleet.api.emulator.eviction_blocked = True  # a PodDisruptionBudget allows no disruption now
    wd = fleet.watchdog(config=fleet.config(action="evict"))
    blocked = run(fleet, wd, 6)
    assert set(results(blocked)) == {"deferred"} and fleet.alive("wedged")
    assert fleet.api.emulator.count_requests(verb="delete") == 0  # no fallback to DELETE
    [(_, msg)] = fleet.events("StalledPodDeletionDeferred")
    assert "PodDisruptionBudget" in msg
    fleet.api.emulator.eviction_blocked = False
    allowed = run(fleet, wd, 5)  # tried again within the backoff's longest wait (4 cycle intervals)
    assert results(allowed) == ["evicted"] and not fleet.alive("wedged")
    assert fleet.api.emulator.count_requests(verb="evict") >= 1
    assert fleet.api.emulator.count_requests(verb="delete") == 0
    assert pod["metadata"]["name"] in {n for n, _ in fleet.events("StalledPodDeleted")}


def test_node_escalation_taints_a_node_after_two_stalled_pods(fleet: Fleet) -> None:
    from watchdog.controller.nodes import NodeEscalator
    from watchdog.core.escalation import NodeStallHistory

    fleet.api.create_object("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-7"},
                                              "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})
    for i in range(6):
        fleet.pod(f"ok-{i}", "progressing")
    for name in ("a", "b"):
        manifest = fleet.pod(f"wedged-{name}", "wedged", namespace=f"team-{name}")
        path = f"/api/v1/namespaces/team-{name}/pods/{manifest['metadata']['name']}"
        fleet.api.patch_object(path, {"spec": {"nodeName": "gpu-7"}})
    kube = KubeClient.from_settings(KubeSettings(host=fleet.api.base_url))
    escalator = NodeEscalator(kube, builders.actuator(kube), NodeStallHistory(threshold=2, window_s=3600),
                              clock=lambda: fleet.now)
    run(fleet, fleet.watchdog(kube, escalation=escalator), 6)
    assert not fleet.alive("wedged-a") and not fleet.alive("wedged-b")
    node = fleet.api.request("GET", "/api/v1/nodes/gpu-7")[1]
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                      {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}]
    [event] = [e for e in fleet.api.list_events("default") if e["reason"] == "StalledNodeTainted"]
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == "gpu-7"


@pytest.mark.parametrize("tenant_label", [TENANT, ""])
def test_node_escalation_counts_one_tenants_namespaces_as_one(fleet: Fleet, tenant_label: str) -> None:
    """Issue 36 item 6: two fake-wedged pods pinned to gpu-7, one in each of a tenant's two namespaces, got gpu-7
    (which also runs team-b's engine) tainted. With tenantLabel naming the tenant they are one tenant: no taint;
    a stalled pod of another tenant there does taint it. Without tenantLabel the two namespaces are two tenants,
    as before."""
    from watchdog.controller.nodes import NodeEscalator

    gpu = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    stalled = {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}
    fleet.api.create_object("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-7"},
                                              "spec": {"taints": [gpu]}})

    def on_gpu_7(name: str, mode: str, namespace: str) -> None:
        manifest = fleet.pod(name, mode, namespace=namespace)
        fleet.api.patch_object(f"/api/v1/namespaces/{namespace}/pods/{manifest['metadata']['name']}",
                               {"spec": {"nodeName": "gpu-7"}})

    for i in range(4):
        fleet.pod(f"ok-{i}", "progressing")
    for ns in ("x-dev", "x-stage"):
        fleet.namespace(ns, **{TENANT: "x"})
        on_gpu_7(f"fake-{ns}", "wedged", ns)
    on_gpu_7("bystander", "progressing", "team-b")
    kube = KubeClient.from_settings(KubeSettings(host=fleet.api.base_url))
    config = fleet.config(tenantLabel=tenant_label, maxDeletions=3)
    escalator = NodeEscalator(kube, builders.actuator(kube), builders.node_history(), clock=lambda: fleet.now)
    wd = fleet.watchdog(kube, escalation=escalator, config=config)
    run(fleet, wd, 8)
    assert not fleet.alive("fake-x-dev") and not fleet.alive("fake-x-stage") and fleet.alive("bystander")
    taints = fleet.api.request("GET", "/api/v1/nodes/gpu-7")[1]["spec"]["taints"]
    if not tenant_label:
        assert taints == [gpu, stalled]
        return
    assert taints == [gpu]
    assert not [e for e in fleet.api.list_events("default") if e["reason"] == "StalledNodeTainted"]
    on_gpu_7("wedged-c", "wedged", "team-c")  # another tenant's pod wedges there too: a bad host
    run(fleet, wd, 8)
    assert not fleet.alive("wedged-c")
    assert fleet.api.request("GET", "/api/v1/nodes/gpu-7")[1]["spec"]["taints"] == [gpu, stalled]
    [event] = [e for e in fleet.api.list_events("default") if e["reason"] == "StalledNodeTainted"]
    assert "3 different pods of 2 tenants" in event["message"]


def test_node_escalation_needs_stalled_pods_of_two_namespaces(fleet: Fleet) -> None:
    """Issue 27 item 9: two fake-wedged pods of one namespace, placed with spec.nodeName on a node that also runs
    another tenant's pod, got the shared node tainted. One namespace's pods alone never taint it now; a stalled
    pod of a second namespace there does."""
    from watchdog.controller.nodes import NodeEscalator
    from watchdog.core.escalation import NodeStallHistory

    gpu = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    fleet.api.create_object("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-7"},
                                              "spec": {"taints": [gpu]}})

    def on_gpu_7(name: str, mode: str, namespace: str) -> None:
        manifest = fleet.pod(name, mode, namespace=namespace)
        path = f"/api/v1/namespaces/{namespace}/pods/{manifest['metadata']['name']}"
        fleet.api.patch_object(path, {"spec": {"nodeName": "gpu-7"}})

    for i in range(4):
        fleet.pod(f"ok-{i}", "progressing")
    on_gpu_7("bystander", "progressing", "team-b")
    on_gpu_7("fake-a", "wedged", "tenant")
    on_gpu_7("fake-b", "wedged", "tenant")
    kube = KubeClient.from_settings(KubeSettings(host=fleet.api.base_url))
    escalator = NodeEscalator(kube, builders.actuator(kube), NodeStallHistory(threshold=2, window_s=3600),
                              clock=lambda: fleet.now)
    wd = fleet.watchdog(kube, escalation=escalator, config=fleet.config(maxDeletions=3, maxDeletionsPerNamespace=2))
    run(fleet, wd, 8)
    assert not fleet.alive("fake-a") and not fleet.alive("fake-b") and fleet.alive("bystander")
    assert fleet.api.request("GET", "/api/v1/nodes/gpu-7")[1]["spec"]["taints"] == [gpu]
    assert not [e for e in fleet.api.list_events("default") if e["reason"] == "StalledNodeTainted"]

    on_gpu_7("wedged-c", "wedged", "team-c")  # a second namespace's pod wedges there too: a bad host
    run(fleet, wd, 8)
    assert not fleet.alive("wedged-c")
    assert fleet.api.request("GET", "/api/v1/nodes/gpu-7")[1]["spec"]["taints"] == [
        gpu, {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}]
    [event] = [e for e in fleet.api.list_events("default") if e["reason"] == "StalledNodeTainted"]
    assert "3 different pods of 2 tenants" in event["message"]


def _old_leader_removes_one_of_two(fleet: Fleet, wall_offset_s: float, caplog: pytest.LogCaptureFixture,
                                   ) -> tuple[str, str]:
    """Two wedged pods of team-x (budget: 1 per namespace per 600 s); a first replica whose wall clock is
    ``wall_offset_s`` off the API server's removes one (its write-ahead ledger entry) and says its clock is off.
    Returns (removed, kept)."""
    for i in range(6):
        fleet.pod(f"ok-{i}", "progressing")
    for name in ("a", "b"):
        fleet.pod(f"wedged-{name}", "wedged", namespace="team-x")
    with caplog.at_level(logging.INFO):
        old = fleet.watchdog(wall_clock=lambda: time.time() + wall_offset_s)
        assert set(results(run(fleet, old, 6))) == {"deleted", "deferred"}
    [skew] = [r.getMessage() for r in caplog.records if "off the Kubernetes API server's" in r.getMessage()]
    assert f"clock is {wall_offset_s:+.0f} s off" in skew  # said once, not every cycle
    assert old.metrics.registry.get_sample_value("vllm_watchdog_clock_skew_seconds") == pytest.approx(
        wall_offset_s, abs=2.0)
    assert old.status is not None and old.status.doc["clock_skew_s"] == pytest.approx(wall_offset_s, abs=2.0)
    [removed] = [n for n in ("wedged-a", "wedged-b") if not fleet.alive(n)]
    return removed, ({"wedged-a", "wedged-b"} - {removed}).pop()


def test_a_removal_by_a_leader_whose_clock_is_behind_still_counts_for_the_next(
        fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36 item 8: the old leader's clock was 900 s behind; it recorded and removed team-x's first pod, and
    the new leader read "0 removals in the last 600 s" and removed the second seconds later. Ledger entries are
    stamped and aged on the API server's clock (its answers' Date), so the new leader counts it."""
    _, kept = _old_leader_removes_one_of_two(fleet, -900.0, caplog)
    new = fleet.watchdog()  # the new leader: a correct clock, the same budget
    reports = run(fleet, new, 6)
    assert fleet.alive(kept) and set(results(reports)) == {"deferred"}
    assert {r.rule for report in reports for _, r in report.remediations} == {"namespace_budget"}


def test_a_leader_whose_clock_is_ahead_does_not_hold_the_budget_longer(
        fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36 item 8, the other way: entries of a writer 900 s ahead looked new to everyone for 900 s more than
    the window. 650 s later (on the API server's clock) the removal no longer counts: the next one goes ahead."""
    _, kept = _old_leader_removes_one_of_two(fleet, 900.0, caplog)
    kube = FakeKube(KubeClient.from_settings(KubeSettings(host=fleet.api.base_url, request_timeout_s=5)))
    later = kube.inner.server_time
    kube.overrides["server_time"] = lambda: (later() or time.time()) + 650.0  # the cluster's clock, 650 s on
    new = fleet.watchdog(kube, wall_clock=lambda: time.time() + 650.0)
    run(fleet, new, 6)
    assert not fleet.alive(kept)


def test_a_pdb_refused_eviction_withdraws_its_intent_backs_off_and_keeps_evidence_once(
        fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36 item 9: every cycle, a PDB-refused eviction wrote the shared ledger twice (intent, withdrawal:
    2 GETs + 2 PUTs), sent the eviction, GET the pod and its namespace and kept an evidence record (20/40/40/20/20
    over 20 cycles). Now the eviction is tried again after a backoff (one interval, doubled, at most 4) and the
    episode has one evidence record. Its intent is withdrawn on each 429 (hostile-tenant review): kept, a restart
    read it back as a removal, so a tenant's own PDB spent the cluster budget for a window after a leader change,
    and ~1,000 refused pods would fill the ledger."""
    for i in range(4):
        fleet.pod(f"ok-{i}", "progressing")
    fleet.pod("wedged", "wedged")
    fleet.api.emulator.eviction_blocked = True
    wd = fleet.watchdog(config=fleet.config(action="evict"))
    run(fleet, wd, 3)  # the stall window and the warm-up (45 s)
    log, ledger = fleet.api.emulator.request_log, "/configmaps/vllm-stall-watchdog-ledger"
    before = len(log)
    with caplog.at_level(logging.INFO):
        reports = run(fleet, wd, 20)
    sent = log[before:]
    evictions = sum(1 for r in sent if r.verb == "evict")
    puts = sum(1 for r in sent if r.resource == "configmaps" and r.verb in ("create", "replace"))  # the ledger's
    gets = sum(1 for r in sent if r.path.endswith(ledger) and r.method == "GET")
    pod_gets = sum(1 for r in sent if r.verb == "get" and r.resource == "pods")
    records = sum(1 for r in caplog.records if r.name == "watchdog.controller.evidence")
    assert set(results(reports)) == {"deferred"} and fleet.alive("wedged")
    assert fleet.api.emulator.count_requests(verb="delete") == 0
    [(_, msg)] = fleet.events("StalledPodDeletionDeferred")  # one Event for the episode
    assert "PodDisruptionBudget" in msg
    assert json.loads(fleet.api.request("GET", "/api/v1/namespaces/default/configmaps/"
                                        "vllm-stall-watchdog-ledger")[1]["data"]["deletions"]) == []
    restarted = fleet.watchdog(config=fleet.config(action="evict"))
    run(fleet, restarted, 1)
    assert restarted.policy.view(restarted.clock())["budget"]["cluster"]["used"] == 0  # nothing read back
    # Tried at cycles 1, 2, 4, 8, 12, 16, 20 (waits of 1, 2, 4, 4, ... intervals): 7 attempts, each one intent
    # and one withdrawal (GET + PUT each).
    assert (evictions, puts, gets, pod_gets, records) == (7, 14, 14, 7, 1)


def test_leadership_is_read_once_per_cycle(fleet: Fleet) -> None:
    """Issue 38: leadership lived in five places (the cycle, the readiness gate, the remediator's own reading per
    stall, ...). The cycle reads it once and hands its CycleFacts to the gate and every remediation."""
    for i in range(3):
        fleet.pod(f"ok-{i}", "progressing")
    for name in ("a", "b"):
        fleet.pod(f"wedged-{name}", "wedged", namespace=f"team-{name}")
    asked = [0]

    def leader() -> bool:
        asked[0] += 1
        return True

    wd = fleet.watchdog(leader=leader, config=fleet.config(quarantine=True, quarantineAfterSeconds=15))
    asked[0] = 0  # the gauge's reading at construction
    reports = run(fleet, wd, 8)
    assert results(reports).count("deleted") == 2  # stalls were decided on: the remediator had facts to read
    assert asked[0] == 8
