"""A replica that cannot read its deletion ledger back (a corrupt ledger ConfigMap, rightly never overwritten)
defers every stall as ``budget_unknown`` — its Event, its log line, the rule VllmWatchdogStallHeldBack covers —
never as ``not_leader`` (issue 38): the real ``run`` process against the Kubernetes API emulator (kmock-based; not a
cluster) and a simulated wedged vLLM pod on loopback, with and without leader election."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from process_kit import deferral_in, run_watchdog, seed_healthy, started

from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("election", [False, True])
def test_an_unreadable_ledger_defers_as_budget_unknown(emulator: EmulatorServer, tmp_path: Path,
                                                      election: bool) -> None:
    api = emulator
    with started(SimPod("127.0.0.2", 0, "progressing"), SimPod("127.0.0.3", 0, "wedged")) as (healthy, wedged):
        seed_healthy(api, healthy, 5)
        api.create_namespace("team-a", {"vllm-watchdog.io/enabled": "true"})
        pod = seed_deployment(api, "team-a", "llama", wedged.address, wedged.port)["pod"]
        api.create_namespace("default")
        api.create_object("/api/v1/namespaces/default/configmaps", {
            "metadata": {"name": "vllm-stall-watchdog-ledger"}, "data": {"deletions": "{not json"}})
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.base_url)
        config = write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "minPodAgeSeconds": 0,
                                                            "leaderElection": election, "logFormat": "json"})
        out = run_watchdog(config, kubeconfig, tmp_path / "run.log", 30, lambda: deferral_in(api, "team-a"))
        assert api.get_pod("team-a", pod["metadata"]["name"]) is not None, out[-2000:]
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert any("deletion ledger configmap default/vllm-stall-watchdog-ledger is unusable" in r["msg"]
                   for r in records), out[-2000:]
        [event] = [e for e in api.list_events("team-a") if e["involvedObject"]["kind"] == "Pod"]
        assert event["reason"] == "StalledPodDeletionDeferred", event
        assert "budget_unknown" in event["message"], event["message"]
        assert "earlier deletions could not be read back yet from the deletion ledger" in event["message"]
        deferrals = [r for r in records if r.get("result") == "deferred"]
        assert deferrals and {r["rule"] for r in deferrals} == {"budget_unknown"}, out[-3000:]
