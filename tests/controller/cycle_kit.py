"""What the cycle tests (tests/controller/test_cycle*.py, test_brake.py, test_status_snapshot.py) share: a
Watchdog on the Kubernetes API emulator with a fake clock (:class:`Rig`), its config, and readers of a cycle's
report and metrics. Not a test module: test modules import from here, never from each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import builders
from metricsum import summed

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.config.loader import load_config
from watchdog.config.settings import Settings
from watchdog.controller.cycle import CycleReport
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config
from watchdog.demo.simpod import Rates, SimPod

NS = "inference"
STEP = 15.0
FAST_RATES = Rates(prompt_tokens=1e7, generation_tokens=1e6, steps=1e5)  # counters rise within a millisecond


def make_config(tmp_path: Path, **overrides: Any) -> Settings:
    # The fake clock moves, the wall clock barely does: pods are seconds old, so the minimum-age rail is off here
    # (it is tested in test_policy.py and test_rails.py).
    path = write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "minPodAgeSeconds": 0, **overrides})
    return load_config(str(path), env={})


class Rig:
    """A Watchdog on the emulator with a fake clock; :meth:`cycle` advances the clock by :data:`STEP`."""

    def __init__(self, api: EmulatorServer, config: Settings, scraper: Any = None, kube: Any = None,
                 **watchdog_kw: Any) -> None:
        self.api, self.now = api, 0.0
        self.kube = kube or KubeClient.from_settings(KubeSettings(host=api.base_url, request_timeout_s=5))
        self.wd = builders.watchdog(config, self.kube, clock=lambda: self.now, scraper=scraper, **watchdog_kw)
        self.sims: list[SimPod] = []

    def sim(self, address: str, mode: str, **kw: Any) -> SimPod:
        sim = SimPod(address, 0, mode, **kw)
        sim.start()
        self.sims.append(sim)
        return sim

    def deployment(self, name: str, sim: SimPod) -> dict[str, dict[str, Any]]:
        return seed_deployment(self.api, NS, name, sim.address, sim.port)

    def cycle(self) -> CycleReport:
        self.now += STEP
        return self.wd.run_cycle()

    def exists(self, pod: dict[str, Any]) -> bool:
        stored = self.api.get_pod(NS, pod["metadata"]["name"])
        return stored is not None and stored["metadata"]["uid"] == pod["metadata"]["uid"]

    def close(self) -> None:
        self.wd.close()
        for sim in self.sims:
            sim.stop()


def states(report: CycleReport) -> dict[str, str]:
    return {ref.split("/", 1)[1].split("-", 1)[0]: v.state for ref, _key, v in report.verdicts}


def remediated(report: CycleReport) -> list[tuple[str, str]]:
    return [(ref, r.result) for ref, r in report.remediations]


def deleted_over(rig: Rig, cycles: int) -> list[str]:
    """The refs of the pods ``cycles`` cycles of ``rig`` deleted, in order."""
    return [ref for _ in range(cycles) for ref, result in remediated(rig.cycle()) if result == "deleted"]


def sample(rig: Rig, name: str, labels: dict[str, str] | None = None) -> float | None:
    return summed(rig.wd.metrics.registry, name, labels or {})
