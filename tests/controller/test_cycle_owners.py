"""Issue 27 item 10 (owner half) at the cycle level: a pod's owner chain is walked once for all its Events (64
wedged engine series, a dry-run announcement, then a deletion or a deferral in a later episode), and the walked
owner is forgotten with the pod."""

from __future__ import annotations

from pathlib import Path

from cycle_kit import Rig, make_config

from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment


def test_one_owner_walk_per_pod_and_forgotten_with_it(emulator: EmulatorServer, tmp_path: Path) -> None:
    emulator.create_namespace("obs", {NAMESPACE_LABEL: "dry-run"})
    rig = Rig(emulator, make_config(tmp_path))
    try:
        sim = rig.sim("127.0.0.6", "wedged", engines=64)
        seeded = seed_deployment(emulator, "obs", "llama", sim.address, sim.port)
        pod, uid = seeded["pod"]["metadata"]["name"], seeded["pod"]["metadata"]["uid"]
        for _ in range(8):
            rig.cycle()
        assert [e["reason"] for e in emulator.list_events("obs") if e["involvedObject"]["kind"] == "Deployment"]
        assert uid in rig.wd.remediator.events.owners
        emulator.patch_object("/api/v1/namespaces/obs", {"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})
        sim.set_mode("progressing")  # that episode ends; the next wedge is enforced
        rig.cycle()
        rig.cycle()
        sim.set_mode("wedged")
        for _ in range(6):
            rig.cycle()
        on_owner = [e["reason"] for e in emulator.list_events("obs") if e["involvedObject"]["kind"] == "Deployment"]
        assert len(on_owner) >= 2 and on_owner[0] == "StalledPodDryRun", on_owner  # then deleted, or deferred
        owner_reads = [r.path for r in emulator.emulator.request_log if r.method == "GET" and "/apis/apps/" in r.path]
        assert owner_reads == [
            f"/apis/apps/v1/namespaces/obs/replicasets/{seeded['replicaset']['metadata']['name']}",
            "/apis/apps/v1/namespaces/obs/deployments/llama"]
        emulator.request("DELETE", f"/api/v1/namespaces/obs/pods/{pod}")
        rig.cycle()
        assert uid not in rig.wd.remediator.events.owners  # forgotten with the pod
    finally:
        rig.close()
