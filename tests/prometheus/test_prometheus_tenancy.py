"""Issue 36 items 1-2 against a real Prometheus: what one tenant's series can do to other tenants' pods.

team-b (not opted in: nothing of it is watched) runs an exporter scraped with ``honor_labels: true`` (what a
PodMonitor with ``honorLabels: true`` renders), which exports
- a frozen busy engine 9 labelled with team-a's healthy pod (its instance: the exporter's own address), and a
  frozen busy engine 8 labelled with the same pod AND that pod's exact ``instance`` (a forger that knows the IP);
- vLLM's pod-scoped ``rl_weight_update_operations_in_flight 1`` labelled with team-c's wedged pod;
and a pod of 300 ``vllm:num_requests_running`` series with 2 KiB model names (any fleet-wide answer is over
``prometheusMaxBytes``), scraped like any vLLM pod. team-d's pod is wedged.

On main team-a's healthy pod was deleted (the confirmation re-read the forged series), team-c's wedge stayed paused
and team-d's wedge was never deleted (every query over the bound: every pod unknown). Now: a row counts only if its
instance is the pod's IP (engine 9 and the pause are dropped), a removal is confirmed by the pod's own /metrics
(engine 8 is not there: not removed), and the queries are scoped to the watched pods of each namespace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prom_kit import (
    OPEN_RAILS,
    PROMETHEUS_SETTINGS,
    FileTarget,
    WatchdogRun,
    free_port,
    new_prometheus,
    outcomes,
    pod_views,
)

from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.prometheus

WINDOW_S = 8.0
SETTINGS = {**FAST_SETTINGS, **OPEN_RAILS, **PROMETHEUS_SETTINGS, "windowSeconds": WINDOW_S,
            "prometheusStalenessSeconds": 10.0, "prometheusMaxBytes": 256 * 1024}
PODS = {"victim": ("team-a", "127.0.0.60", "progressing"), "paused": ("team-c", "127.0.0.61", "wedged"),
        "wedge": ("team-d", "127.0.0.62", "wedged")}


class Static(SimPod):
    """Serves ``text`` as its /metrics (an exporter of the test's choosing)."""

    text = b""

    def exposition(self) -> bytes:
        return self.text


@dataclass
class Tenancy:
    names: dict[str, str] = field(default_factory=dict)
    history: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    alive: set[str] = field(default_factory=set)
    events: list[dict[str, Any]] = field(default_factory=list)
    log: str = ""


def _forged(victim: str, victim_instance: str, paused: str) -> bytes:
    a, c = f'namespace="team-a",pod="{victim}",model_name="m"', f'namespace="team-c",pod="{paused}"'
    return ("# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{{a},engine="9"}} 4\n'
            f'vllm:num_requests_running{{{a},engine="8",instance="{victim_instance}"}} 4\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{{a},engine="9"}} 500\n'
            f'vllm:generation_tokens_total{{{a},engine="8",instance="{victim_instance}"}} 500\n'
            "# TYPE vllm:rl_weight_update_operations_in_flight gauge\n"
            f'vllm:rl_weight_update_operations_in_flight{{{c},operation="update"}} 1\n').encode()


def _hog(series: int = 300) -> bytes:
    rows = [f'vllm:num_requests_running{{engine="0",model_name="{i}-{"x" * 2048}"}} 1' for i in range(series)]
    return ("# TYPE vllm:num_requests_running gauge\n" + "\n".join(rows) + "\n").encode()


@pytest.fixture(scope="module")
def forgery(flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    """The forging exporter alone (so that nothing else can hide what it does)."""
    yield from _run(tmp_path_factory.mktemp("prometheus-forgery"), flavour, forger=True)


@pytest.fixture(scope="module")
def blinding(flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    """The pod of huge series alone."""
    yield from _run(tmp_path_factory.mktemp("prometheus-blinding"), flavour, forger=False)


def _run(tmp: Path, flavour: str, forger: bool) -> Iterator[Tenancy]:
    """One server of ``flavour`` and one watchdog run over team-a/c/d's pods and team-b's exporter (``forger``) or
    its pod of huge series (else), until team-c's and team-d's wedges are gone (at most 40 s), then one window
    more."""
    (tmp / "prom").mkdir()
    prom = new_prometheus(tmp / "prom", flavour, honor_job=True)
    result, sims, run = Tenancy(), [], None
    try:
        with EmulatorServer() as api:
            for namespace in ("team-a", "team-c", "team-d"):
                api.create_namespace(namespace, {"vllm-watchdog.io/enabled": "true"})
            targets = []
            for key, (namespace, address, mode) in PODS.items():
                sim = SimPod(address, 0, mode, model_name="m")
                sim.start()
                sims.append(sim)
                pod = seed_deployment(api, namespace, key, address, sim.port)["pod"]
                result.names[key] = pod["metadata"]["name"]
                targets.append(FileTarget(f"{address}:{sim.port}", namespace, result.names[key]))
            team_b = Static("127.0.0.63", 0)
            team_b.text = (_forged(result.names["victim"], targets[0].address, result.names["paused"]) if forger
                           else _hog())
            team_b.start()
            sims.append(team_b)
            if forger:
                prom.set_targets(targets)
                prom.set_targets([FileTarget(f"127.0.0.63:{team_b.port}", "team-b", "exporter-0")], job="exporter")
                prom.wait_up({t.pod: 1.0 for t in targets})
                deadline = time.monotonic() + 30
                while not prom.query('vllm:rl_weight_update_operations_in_flight{namespace="team-c"}'):
                    assert time.monotonic() < deadline, prom.log_tail()
                    time.sleep(0.3)
            else:
                prom.set_targets([*targets, FileTarget(f"127.0.0.63:{team_b.port}", "team-b", "hog-0")])
                prom.wait_up({**{t.pod: 1.0 for t in targets}, "hog-0": 1.0})
            status_port = free_port()
            config = write_config(tmp / "config.yaml", **{**SETTINGS, "prometheusUrl": prom.url,
                                                          "listenAddress": f"127.0.0.1:{status_port}"})
            run = WatchdogRun(config, write_kubeconfig(tmp / "kubeconfig", api.base_url), tmp / "watchdog.log",
                              status_port).start()
            end = time.monotonic() + 40
            while time.monotonic() < end and run.alive():
                gone = {key for key, (namespace, _, _) in PODS.items()
                        if api.get_pod(namespace, result.names[key]) is None}
                if {"paused", "wedge"} <= gone:
                    break
                time.sleep(0.2)
            time.sleep(WINDOW_S)  # a window more: the forged stalls had every chance
            result.alive = {p["metadata"]["name"] for p in api.list_objects("/api/v1/pods")}
            result.events = [e for namespace in ("team-a", "team-c", "team-d") for e in api.list_events(namespace)]
    finally:
        if run is not None:
            result.log = run.stop()
            result.history = run.history
            (tmp / "status-history.json").write_text(json.dumps({"history": run.history, "names": result.names}))
        for sim in sims:
            sim.stop()
        prom.stop()
    yield result


def test_a_forged_series_never_gets_another_tenants_healthy_pod_deleted(forgery: Tenancy) -> None:
    tenancy = forgery
    assert tenancy.history and "Traceback" not in tenancy.log, tenancy.log[-3000:]
    assert tenancy.names["victim"] in tenancy.alive, tenancy.log[-3000:]
    victim = [e for e in tenancy.events if e["involvedObject"]["name"] == tenancy.names["victim"]]
    assert not [e for e in victim if e["reason"] == "StalledPodDeleted"], victim
    engines = {str(e["labels"].get("engine")) for v in pod_views(tenancy.history, tenancy.names["victim"])
               for e in v.get("engines") or []}
    assert "9" not in engines, engines  # not scraped from the pod's IP: never read as its engine
    # engine 8 claims the pod's own instance: read, judged, but the pod's own /metrics has no such engine
    aborted = [line for line in tenancy.log.splitlines() if tenancy.names["victim"] in line and "aborted" in line]
    assert "8" not in engines or aborted, tenancy.log[-3000:]


def test_a_forged_pause_does_not_hold_another_tenants_wedge(forgery: Tenancy) -> None:
    tenancy = forgery
    assert tenancy.names["paused"] not in tenancy.alive, tenancy.log[-3000:]
    states = {str(e.get("state")) for v in pod_views(tenancy.history, tenancy.names["paused"])
              for e in v.get("engines") or []}
    assert "paused" not in states, states


def test_one_unwatched_pods_huge_series_do_not_blind_other_namespaces(blinding: Tenancy) -> None:
    assert {blinding.names[k] for k in ("wedge", "paused")} & blinding.alive == set(), blinding.log[-3000:]
    assert blinding.names["victim"] in blinding.alive
    for key in PODS:
        assert "prometheus_error" not in outcomes(pod_views(blinding.history, blinding.names[key])), key
