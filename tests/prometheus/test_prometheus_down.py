"""Prometheus down: every prometheus pod is unknown and nothing is deleted, however long it lasts; when it
answers again, the wedge it shows is detected and deleted. Its own Prometheus (stopped and started again on the
same port and TSDB), so the session's is never disturbed.
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
    engine_states,
    free_port,
    new_prometheus,
    outcomes,
    pod_views,
)

from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.prometheus

NS = "prom-down"
WINDOW_S = 5.0
DOWN_FOR_S = 14.0  # warm-up + more than two windows


@dataclass
class Down:
    names: dict[str, str] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    history: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    alive_while_down: set[str] = field(default_factory=set)
    alive_after: set[str] = field(default_factory=set)
    error_count: float = 0.0
    log: str = ""

    def views(self, key: str, since: float = 0.0, until: float = float("inf")) -> list[dict[str, Any]]:
        return pod_views([h for h in self.history if h[0] < until], self.names[key], since)


@pytest.fixture(scope="module")
def down(flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Down]:
    tmp: Path = tmp_path_factory.mktemp("prometheus-down")
    (tmp / "prom").mkdir()
    prom = new_prometheus(tmp / "prom", flavour)
    result, sims, run = Down(), [SimPod("127.0.0.40", 0, "wedged"), SimPod("127.0.0.41", 0, "progressing")], None
    try:
        with EmulatorServer() as api:
            api.create_namespace(NS, {"vllm-watchdog.io/enabled": "true"})
            targets = []
            for key, sim in zip(("wedged", "busy"), sims, strict=True):
                sim.start()
                pod = seed_deployment(api, NS, key, sim.address, sim.port)["pod"]
                result.names[key] = pod["metadata"]["name"]
                targets.append(FileTarget(f"{sim.address}:{sim.port}", NS, result.names[key]))
            prom.set_targets(targets)
            prom.wait_up({name: 1.0 for name in result.names.values()})
            status_port = free_port()
            config = write_config(tmp / "config.yaml", **{
                **FAST_SETTINGS, **OPEN_RAILS, **PROMETHEUS_SETTINGS, "windowSeconds": WINDOW_S,
                "prometheusUrl": prom.url, "listenAddress": f"127.0.0.1:{status_port}"})
            run = WatchdogRun(config, write_kubeconfig(tmp / "kubeconfig", api.base_url), tmp / "watchdog.log",
                              status_port).start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not pod_views(run.history, result.names["wedged"]):
                time.sleep(0.1)
            prom.stop()  # the watchdog has seen the pods once; now Prometheus is gone
            result.marks["down"] = time.monotonic()
            time.sleep(DOWN_FOR_S)
            result.alive_while_down = {p["metadata"]["name"] for p in api.list_objects("/api/v1/pods")}
            result.error_count = run.metric("vllm_watchdog_scrapes_total", outcome="prometheus_error")
            prom.start()
            result.marks["up"] = time.monotonic()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and api.get_pod(NS, result.names["wedged"]) is not None:
                time.sleep(0.2)
            time.sleep(2)
            result.alive_after = {p["metadata"]["name"] for p in api.list_objects("/api/v1/pods")}
    finally:
        if run is not None:
            result.log = run.stop()
            result.history = run.history
            (tmp / "status-history.json").write_text(json.dumps(
                {"marks": result.marks, "history": run.history, "names": result.names}))
        for sim in sims:
            sim.stop()
        prom.stop()
    yield result


def test_prometheus_down_deletes_nothing_and_every_pod_is_unknown(down: Down) -> None:
    assert set(down.names.values()) <= down.alive_while_down, down.log[-3000:]
    assert "Traceback" not in down.log, down.log[-3000:]
    for key in ("wedged", "busy"):
        views = down.views(key, since=down.marks["down"] + 3, until=down.marks["up"])
        assert views and outcomes(views) == {"prometheus_error"}, (key, outcomes(views))
        assert engine_states(views) <= {"unknown"}, (key, engine_states(views))
    assert down.error_count >= 5  # one per pod per cycle while it was down


def test_when_prometheus_answers_again_the_wedge_is_deleted(down: Down) -> None:
    assert down.names["wedged"] not in down.alive_after, down.log[-3000:]
    assert down.names["busy"] in down.alive_after
    name = down.names["wedged"]
    assert any(f"pod {NS}/{name} series {{" in line and "-> stalled" in line for line in down.log.splitlines())
    (deleted,) = [line for line in down.log.splitlines() if "remediation deleted" in line]
    assert name in deleted
