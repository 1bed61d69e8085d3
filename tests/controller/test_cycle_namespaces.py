"""Namespace-only mode (``watchNamespaces``, issue 30 item 5): the cycle lists the pods of the named namespaces
alone, one LIST each, so an opted-in namespace that is not named is never watched, scraped or acted on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import builders
import pytest
import tenacity
from cycle_kit import NS, STEP, Rig, make_config, remediated, states

from watchdog.adapters import podcache
from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.adapters.podcache import Informer, PodCache
from watchdog.controller.cycle import CycleReport
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment
from watchdog.demo.simpod import SimPod

ELSEWHERE = "not-named"


def test_only_the_named_namespaces_pods_are_watched_and_acted_on(emulator: EmulatorServer, tmp_path: Path) -> None:
    for namespace in (NS, ELSEWHERE):  # both opted in: the label alone would make both watched
        emulator.create_namespace(namespace, {NAMESPACE_LABEL: "true"})
    rig = Rig(emulator, make_config(tmp_path, watchNamespaces=NS))
    try:
        named = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))
        other_sim = rig.sim("127.0.0.3", "wedged")
        other = seed_deployment(emulator, ELSEWHERE, "wedged", other_sim.address, other_sim.port)
        reports = [rig.cycle() for _ in range(3)]
        assert [r.pods for r in reports] == [1, 1, 1]
        assert states(reports[-1]) == {"wedged": "stalled"}
        assert remediated(reports[-1]) == [(f"{NS}/{named['pod']['metadata']['name']}", "deleted")]
        assert emulator.get_pod(ELSEWHERE, other["pod"]["metadata"]["name"]) is not None
        assert other_sim.scrapes == 0  # never scraped
    finally:
        rig.close()


# -- issue 36 item 3: one namespace whose pods cannot be listed blinds only itself ---------------------------------

TEAM_A, TEAM_B = "team-a", "team-b"


class CachedRig:
    """What ``run`` wires in namespace-only mode (the watch cache, one informer per namespace) on the emulator, with
    a fake clock for the cycle and a fake one for the cache's staleness bound."""

    def __init__(self, emulator: EmulatorServer, tmp_path: Path, **cache_kw: Any) -> None:
        self.api, self.now, self.cache_now = emulator, 0.0, 0.0
        self.kube = KubeClient.from_settings(KubeSettings(host=emulator.base_url, request_timeout_s=5))
        config = make_config(tmp_path, watchNamespaces=f"{TEAM_A},{TEAM_B}", apiTimeoutSeconds=3)
        self.cache = PodCache(self.kube, first_sync_wait_s=3, clock=lambda: self.cache_now, make=lambda r, s, n: (
            Informer(self.kube, r, s, n, clock=lambda: self.cache_now, backoff=tenacity.wait_fixed(0.05),
                     **cache_kw)))
        self.wd = builders.watchdog(config, self.kube, clock=lambda: self.now, listing=self.cache)
        self.sims: list[SimPod] = []

    def wedged(self, namespace: str) -> dict[str, Any]:
        sim = SimPod(f"127.0.0.{len(self.sims) + 2}", 0, "wedged")
        sim.start()
        self.sims.append(sim)
        return seed_deployment(self.api, namespace, "wedged", sim.address, sim.port)["pod"]

    def cycle(self) -> CycleReport:
        self.now += STEP
        return self.wd.run_cycle()

    def seen(self, pods: int) -> None:
        """Until the cache holds ``pods`` pods (a cycle after it saw them)."""
        deadline = time.monotonic() + 5
        while self.cycle().pods != pods:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def status(self) -> dict[str, Any]:
        assert self.wd.status is not None
        return dict(self.wd.status.doc)

    def unreadable(self) -> dict[str, float]:
        return {s.labels["namespace"]: s.value for f in self.wd.metrics.namespace_unreadable.collect()
                for s in f.samples}

    def close(self) -> None:
        self.wd.close()
        for sim in self.sims:
            sim.stop()


@pytest.fixture
def teams(emulator: EmulatorServer) -> EmulatorServer:
    for namespace in (TEAM_A, TEAM_B):
        emulator.create_namespace(namespace, {NAMESPACE_LABEL: "true"})
    return emulator


def test_a_namespace_whose_rolebinding_is_gone_blinds_only_itself(teams: EmulatorServer, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36 item 3: team-b's admin deleted the watchdog's RoleBinding there (every request in team-b: 403). On
    main every cycle failed (``cache not synced yet ... pods in team-b``) and team-a's wedge stayed. Now team-b's
    pods are unknown and said so (log, /status, metric) and team-a's wedge is deleted; a 403 in one namespace is
    not the watchdog's credentials; team-b's RoleBinding back: its pods are judged again."""
    teams.emulator.forbidden.add(TEAM_B)
    rig = CachedRig(teams, tmp_path)
    try:
        wedge = rig.wedged(TEAM_A)
        b_wedge = rig.wedged(TEAM_B)
        reports = [rig.cycle() for _ in range(3)]
        assert [r.pods for r in reports] == [1, 1, 1]
        assert remediated(reports[-1]) == [(f"{TEAM_A}/{wedge['metadata']['name']}", "deleted")]
        assert teams.get_pod(TEAM_B, b_wedge["metadata"]["name"]) is not None
        assert rig.unreadable() == {TEAM_A: 0.0, TEAM_B: 1.0}
        [entry] = rig.status()["namespaces_unreadable"]
        assert entry["namespace"] == TEAM_B and entry["status"] == 403 and entry["for_s"] == 2 * STEP
        assert entry["why"].startswith("watch pods '") and "' in team-b: HTTP 403 cache not synced yet" in entry["why"]
        assert "HTTP 403 Forbidden" in entry["why"]
        said = [r.getMessage() for r in caplog.records if getattr(r, "reason", "") == "namespace_unreadable"]
        assert len(said) == 1 and said[0].startswith("namespace team-b: its pods cannot be listed, so they are "
                                                      "unknown")
        assert rig.kube.credentials.counts[403] == 0  # team-b's 403s are not the watchdog's credentials
        assert rig.kube.credentials.refusal() is None
        assert rig.wd.namespaces_down() is None  # team-a is read: /readyz is not failed for team-b
        teams.emulator.forbidden.discard(TEAM_B)  # the RoleBinding is back
        deadline = time.monotonic() + 5
        while TEAM_B in [e["namespace"] for e in rig.status()["namespaces_unreadable"]]:
            assert time.monotonic() < deadline
            time.sleep(0.06)
            rig.cycle()
        assert rig.unreadable() == {TEAM_A: 0.0, TEAM_B: 0.0}
        reports = [rig.cycle() for _ in range(3)]
        assert (f"{TEAM_B}/{b_wedge['metadata']['name']}", "deleted") in [
            d for r in reports for d in remediated(r)]
    finally:
        rig.close()


def test_every_namespace_refused_fails_readyz_without_blaming_credentials(teams: EmulatorServer,
                                                                          tmp_path: Path) -> None:
    """Only when no watched namespace can be read is nothing judged at all: /readyz names it (the credentials are
    still accepted: the namespaces' list is)."""
    teams.emulator.forbidden.update({TEAM_A, TEAM_B})
    rig = CachedRig(teams, tmp_path)
    try:
        assert rig.cycle().pods == 0
        down = rig.wd.namespaces_down()
        assert down is not None and down.startswith("the pods of every watched namespace (team-a, team-b) cannot "
                                                     "be listed, so nothing is judged; first: watch pods")
        assert rig.kube.credentials.counts[403] == 0 and rig.kube.credentials.refusal() is None
    finally:
        rig.close()


def test_a_deleted_namespace_is_dropped_and_watched_again_when_it_comes_back(teams: EmulatorServer, tmp_path: Path,
                                                                             ) -> None:
    """team-b deleted at offboarding (its RoleBinding with it): its informer is stopped and forgotten, its metric
    series removed, nothing reported every cycle; team-a goes on. Re-created: watched again (a new informer)."""
    rig = CachedRig(teams, tmp_path)
    try:
        rig.cycle()
        assert {key[2] for key in rig.cache.informers if key[0] == "pods"} == {TEAM_A, TEAM_B}
        old = rig.cache.informers[("pods", rig.wd.config.targets[0].pod_selector, TEAM_B)]
        teams.emulator.forbidden.add(TEAM_B)
        assert teams.request("DELETE", f"/api/v1/namespaces/{TEAM_B}")[0] == 200
        deadline = time.monotonic() + 5
        while TEAM_B in rig.unreadable():
            assert time.monotonic() < deadline
            time.sleep(0.05)
            rig.cycle()
        assert {key[2] for key in rig.cache.informers if key[0] == "pods"} == {TEAM_A}
        assert old._thread is not None and not old._thread.is_alive()
        assert rig.status()["namespaces_unreadable"] == [] and rig.wd.namespaces_down() is None
        wedge = rig.wedged(TEAM_A)
        rig.seen(1)
        reports = [rig.cycle() for _ in range(3)]
        assert [d for r in reports for d in remediated(r)] == [(f"{TEAM_A}/{wedge['metadata']['name']}", "deleted")]
        teams.emulator.forbidden.discard(TEAM_B)
        teams.create_namespace(TEAM_B, {NAMESPACE_LABEL: "true"})
        while TEAM_B not in rig.unreadable():
            assert time.monotonic() < deadline + 5
            time.sleep(0.05)
            rig.cycle()
        assert rig.unreadable() == {TEAM_A: 0.0, TEAM_B: 0.0}
        assert {key[2] for key in rig.cache.informers if key[0] == "pods"} == {TEAM_A, TEAM_B}
    finally:
        rig.close()


def test_without_a_restart_the_namespace_turns_unreadable_once_its_cache_is_stale(teams: EmulatorServer,
                                                                                  tmp_path: Path) -> None:
    """team-b's RoleBinding deleted while its WATCH is open: its cache serves its pods until the WATCH ends and the
    next ones fail for the staleness bound (STALE_S), then team-b alone is unreadable; team-a is judged throughout
    (on main: every cycle failed from then on)."""
    rig = CachedRig(teams, tmp_path, watch_s=(1, 1))  # each WATCH ends after 1 s
    try:
        assert rig.cycle().pods == 0
        teams.emulator.forbidden.add(TEAM_B)
        time.sleep(1.5)  # team-b's WATCH ended and the next one was refused
        assert rig.cycle().pods == 0 and rig.unreadable() == {TEAM_A: 0.0, TEAM_B: 0.0}  # within the bound
        rig.cache_now += podcache.STALE_S + 1
        wedge = rig.wedged(TEAM_A)
        rig.seen(1)
        reports = [rig.cycle() for _ in range(3)]
        assert rig.unreadable() == {TEAM_A: 0.0, TEAM_B: 1.0}
        assert [d for r in reports for d in remediated(r)] == [(f"{TEAM_A}/{wedge['metadata']['name']}", "deleted")]
        [entry] = rig.status()["namespaces_unreadable"]
        assert "cache stale" in entry["why"] and entry["status"] == 403
    finally:
        rig.close()


def test_without_the_cache_a_refused_namespace_blinds_only_itself_too(teams: EmulatorServer, tmp_path: Path) -> None:
    """``run --once`` lists from the API itself (one LIST per namespace and target): team-b's 403 leaves team-b
    unknown and is not the watchdog's credentials; team-a's wedge is deleted."""
    teams.emulator.forbidden.add(TEAM_B)
    rig = Rig(teams, make_config(tmp_path, watchNamespaces=f"{TEAM_A},{TEAM_B}"))
    try:
        sim = rig.sim("127.0.0.2", "wedged")
        wedge = seed_deployment(teams, TEAM_A, "wedged", sim.address, sim.port)["pod"]
        reports = [rig.cycle() for _ in range(3)]
        assert remediated(reports[-1]) == [(f"{TEAM_A}/{wedge['metadata']['name']}", "deleted")]
        assert rig.kube.credentials.counts[403] == 0 and rig.kube.credentials.refusal() is None
        assert rig.wd.status is not None
        [entry] = rig.wd.status.doc["namespaces_unreadable"]
        assert entry["namespace"] == TEAM_B and entry["status"] == 403
        assert entry["why"].startswith("list pods '") and "in team-b: HTTP 403 Forbidden" in entry["why"]
    finally:
        rig.close()
