"""``python -m watchdog run --config FILE --kubeconfig K`` with ``source: prometheus``, as a separate process:
the API emulator (kmock, real HTTP; not a cluster) for pods and deletion, and the loopback fake of Prometheus'
query API (tests/promfake.py) fed one sample a second, as Prometheus scraping the pods would. The real
Prometheus tier is tests/prometheus/."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from process_kit import run_watchdog

from tests.promfake import FakePrometheus
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.e2e


def test_run_reads_prometheus_and_deletes_only_the_wedged_pod(emulator: EmulatorServer, tmp_path: Path) -> None:
    # the simulated pods serve their /metrics: the removal is confirmed by the wedged pod itself, never Prometheus
    api = emulator
    api.create_namespace("llm", {"vllm-watchdog.io/enabled": "true"})
    sims = [SimPod("127.0.0.2", 0, "wedged"), SimPod("127.0.0.3", 0, "progressing")]
    for sim in sims:
        sim.start()
    wedged = seed_deployment(api, "llm", "wedged", "127.0.0.2", sims[0].port)["pod"]["metadata"]
    busy = seed_deployment(api, "llm", "busy", "127.0.0.3", sims[1].port)["pod"]["metadata"]
    stop = threading.Event()
    with FakePrometheus() as prom:
        def feed() -> None:  # Prometheus scraping both pods every second
            while not stop.wait(1.0):
                now = time.time()
                for pod, sim in ((wedged, sims[0]), (busy, sims[1])):
                    target = {"namespace": "llm", "pod": pod["name"], "instance": f"{sim.address}:{sim.port}",
                              "job": "vllm"}
                    prom.feed(sim.exposition().decode(), target, now)
                    prom.add("up", target, now, 1)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        config = write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "minPodAgeSeconds": 0,
                                                           "source": "prometheus", "prometheusUrl": prom.url,
                                                           "prometheusTimeoutSeconds": 0.8})
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.base_url)
        try:
            log = run_watchdog(config, kubeconfig, tmp_path / "run.log", 30,
                               lambda: api.get_pod("llm", wedged["name"]) is None)
        finally:
            stop.set()
            for sim in sims:
                sim.stop()
    assert api.get_pod("llm", wedged["name"]) is None, log[-3000:]
    assert api.get_pod("llm", busy["name"]) is not None
    assert "source prometheus for targets" in log and "Traceback" not in log
    assert all(q.startswith(("sum by (", "max by (", "min by (")) for q, _ in prom.queries)  # aggregating only
