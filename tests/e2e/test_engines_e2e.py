"""End to end, per engine: the real watchdog process against the API emulator and simulated pods serving what
each engine really exposes (SGLang's split scheduler/tokenizer series with data-parallel and tensor-parallel
ranks; vLLM V1's long chunked prefill and sleep mode), over real HTTP on loopback.

The emulator is not a real cluster (see tests/cluster for that); this proves the profiles end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from watchdog.demo.controlplane.api import free_port, stop_process
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.e2e

NS = "engines"
SGLANG = {"app.kubernetes.io/name": "sglang"}
TARGETS = [{"name": "sglang", "podSelector": "app.kubernetes.io/name=sglang", "profile": "sglang"},
           {"name": "vllm", "podSelector": "app.kubernetes.io/name=vllm"}]
OPEN_RAILS = {"maxDeletions": 10, "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0, "minPodAgeSeconds": 0}


@dataclass
class World:
    api: EmulatorServer
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    sims: list[SimPod] = field(default_factory=list)
    log: str = ""
    alive: set[str] = field(default_factory=set)
    events: list[dict[str, Any]] = field(default_factory=list)

    def deploy(self, key: str, address: str, mode: str, **kw: Any) -> SimPod:
        labels = kw.pop("labels", None)
        sim = SimPod(address, 0, mode, **kw)
        sim.start()
        self.sims.append(sim)
        self.pods[key] = seed_deployment(self.api, NS, key, sim.address, sim.port, labels=labels)
        return sim

    def name(self, key: str) -> str:
        return str(self.pods[key]["pod"]["metadata"]["name"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("engines")
    with EmulatorServer() as api:
        world = World(api)
        api.create_namespace(NS, {"vllm-watchdog.io/enabled": "true"})
        proc = None
        try:
            world.deploy("sglang-busy", "127.0.0.20", "progressing", engines=2, flavor="sglang", labels=SGLANG)
            world.deploy("sglang-prefill", "127.0.0.21", "prefill", flavor="sglang", labels=SGLANG)
            rank_wedged = world.deploy("sglang-rank-wedged", "127.0.0.22", "progressing", engines=2,
                                       flavor="sglang", labels=SGLANG)
            rank_wedged.set_mode("wedged", engines=[1])  # one data-parallel rank wedges, the other serves
            world.deploy("vllm-sleeping", "127.0.0.23", "sleeping")
            config = write_config(tmp / "config.yaml", **{**FAST_SETTINGS, **OPEN_RAILS, "targets": TARGETS,
                                                          "listenAddress": f"127.0.0.1:{free_port()}"})
            kubeconfig = write_kubeconfig(tmp / "kubeconfig", api.base_url)
            with open(tmp / "watchdog.log", "w") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "watchdog", "run", "--config", str(config), "--kubeconfig",
                     str(kubeconfig)], stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline and proc.poll() is None and \
                        api.get_pod(NS, world.name("sglang-rank-wedged")) is not None:
                    time.sleep(0.25)
                time.sleep(4)  # four more cycles: nothing else may be deleted
            world.alive = {p["metadata"]["name"] for p in api.list_objects("/api/v1/pods")}
            world.events = api.list_events(NS)
        finally:
            stop_process(proc, 10)
            for sim in world.sims:
                sim.stop()
        world.log = (tmp / "watchdog.log").read_text()
        yield world


def test_one_wedged_sglang_data_parallel_rank_deletes_its_pod(world: World) -> None:
    name = world.name("sglang-rank-wedged")
    assert name not in world.alive, world.log[-3000:]
    deleted = [line for line in world.log.splitlines() if "remediation deleted" in line]
    assert len(deleted) == 1 and name in deleted[0]
    (event,) = [e for e in world.events if e["involvedObject"]["kind"] == "Pod"]
    assert event["reason"] == "StalledPodDeleted" and event["involvedObject"]["name"] == name
    assert 'dp_rank="1"' in event["message"] and "sglang:realtime_tokens_total=" in event["message"]


def test_busy_and_prefilling_sglang_and_a_sleeping_vllm_are_kept(world: World) -> None:
    for key in ("sglang-busy", "sglang-prefill", "vllm-sleeping"):
        assert world.name(key) in world.alive, key
    assert "Traceback" not in world.log


def test_tp_ranks_are_one_engine_and_the_tokenizer_series_joins_no_engine(world: World) -> None:
    # Two dp ranks x two TP ranks (+ the tokenizer's series) are exactly two engine series per pod.
    name = world.name("sglang-busy")
    keys = {line.split("series {", 1)[1].split("}", 1)[0] for line in world.log.splitlines()
            if f"pod {NS}/{name} series {{" in line}
    assert keys == {f'dp_rank="{r}",engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct"'
                    for r in (0, 1)}
    prefill = world.name("sglang-prefill")
    changes = [line for line in world.log.splitlines() if f"pod {NS}/{prefill} series" in line and " -> " in line]
    assert changes and changes[-1].endswith("progressing: 1 running, sglang:realtime_tokens_total moving")
