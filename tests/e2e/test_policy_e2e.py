"""Issue 30 item 1 done-when, end to end: the real ``watchdog run`` process (emulator, simulated vLLM pods, real
HTTP on loopback) deletes a pod at its target's window while a pod whose annotation lengthens its window is kept
past the global window; the Event says which window applied."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from process_kit import run_watchdog

from watchdog.core.model import WINDOW_ANNOTATION
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.e2e
NS = "llm"
GLOBAL_S, TARGET_S = 10.0, 4.0


def test_a_pod_goes_at_its_targets_window_and_an_annotated_one_outlasts_the_global_window(
        emulator: EmulatorServer, tmp_path: Path) -> None:
    api = emulator
    api.create_namespace(NS, {"vllm-watchdog.io/enabled": "true"})
    sims = [SimPod(f"127.0.0.{i}", 0, "wedged") for i in (2, 3)]
    for sim in sims:
        sim.start()
    patient = seed_deployment(api, NS, "patient", sims[0].address, sims[0].port,
                              annotations={WINDOW_ANNOTATION: "120"})["pod"]["metadata"]
    fast: dict[str, object] = {}

    def add_fast() -> None:  # after the warm-up (one global window), so its own window decides
        fast.update(seed_deployment(api, NS, "fast", sims[1].address, sims[1].port, labels={"app": "fast"})
                    ["pod"]["metadata"], created=time.monotonic())

    config = write_config(tmp_path / "config.yaml", **{
        **FAST_SETTINGS, "windowSeconds": GLOBAL_S, "minPodAgeSeconds": 0, "maxDeletions": 10,
        "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0,
        "targets": [{"name": "fast", "podSelector": "app=fast", "windowSeconds": TARGET_S},
                    {"name": "vllm", "podSelector": "app.kubernetes.io/name=vllm"}]})
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.base_url)
    timer = threading.Timer(GLOBAL_S + 2, add_fast)
    timer.start()
    gone: list[float] = []

    def done() -> bool:
        if "name" in fast and not gone and api.get_pod(NS, str(fast["name"])) is None:
            gone.append(time.monotonic())
        return bool(gone) and time.monotonic() - gone[0] > 3  # a few cycles more for the patient pod
    try:
        log = run_watchdog(config, kubeconfig, tmp_path / "run.log", 45, done)
    finally:
        timer.cancel()
        for sim in sims:
            sim.stop()
    assert gone, log[-3000:]
    assert gone[0] - float(fast["created"]) < GLOBAL_S, log[-3000:]  # its 4 s window, not the global 10 s
    assert api.get_pod(NS, patient["name"]) is not None  # wedged ~20 s, past the global window: its own is 120 s
    messages = [e["message"] for e in api.list_events(NS) if e["reason"] == "StalledPodDeleted"
                and e["involvedObject"]["kind"] == "Pod"]
    assert len(messages) == 1 and "stalled past the 4 s window (set by its target" in messages[0], messages
    assert "Traceback" not in log
