"""The deletion budget survives a restart: two watchdog processes in sequence against the Kubernetes API emulator
(kmock-based; not a cluster) and simulated vLLM pods on loopback.

The first process uses up the cluster budget (2 deletions); the second one reads its predecessor's deletion ledger
back (one GET; Events are never read back) and defers the third stall instead of deleting it. Without a ledger
(``budgetLedger: false``) nothing can be read back: tests/controller/test_budget.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from process_kit import deferral_in, run_watchdog, seed_healthy, started

from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.e2e


def test_a_restarted_watchdog_keeps_its_deletion_budget(emulator: EmulatorServer, tmp_path: Path) -> None:
    api = emulator
    with started(SimPod("127.0.0.2", 0, "progressing"), SimPod("127.0.0.3", 0, "wedged")) as (healthy, wedged):
        pods = {}
        seed_healthy(api, healthy, 7)
        for name in ("a", "b"):
            api.create_namespace(f"team-{name}", {"vllm-watchdog.io/enabled": "true"})
            pods[name] = seed_deployment(api, f"team-{name}", "llama", wedged.address, wedged.port)["pod"]
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.base_url)
        config = write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "minPodAgeSeconds": 0,
                                                            "deletionWindowSeconds": 600})

        def gone(name: str) -> bool:
            meta = pods[name]["metadata"]
            return api.get_pod(meta["namespace"], meta["name"]) is None

        first = run_watchdog(config, kubeconfig, tmp_path / "first.log", 30, lambda: gone("a") and gone("b"))
        assert gone("a") and gone("b"), first[-2000:]

        api.create_namespace("team-c", {"vllm-watchdog.io/enabled": "true"})
        pods["c"] = seed_deployment(api, "team-c", "llama", wedged.address, wedged.port)["pod"]
        second = run_watchdog(config, kubeconfig, tmp_path / "second.log", 30, lambda: deferral_in(api, "team-c"))
        assert ("deletion budget restored from the ledger configmap default/vllm-stall-watchdog-ledger: 2 removals"
                in second), second[-2000:]
        assert api.emulator.count_requests(verb="list", resource="events") == 0
        assert not gone("c")
        [event] = [e for e in api.list_events("team-c") if e["involvedObject"]["kind"] == "Pod"]
        assert event["reason"] == "StalledPodDeletionDeferred"
        assert "cluster budget used: 2 deletions" in event["message"]
