"""Per-workload signals at the cycle level (issue 30 item 2): the per-workload metrics carry the LLM pod's namespace
and target and keep series only for watched (namespace, target) pairs; the per-engine gauge (perEngineMetrics)
follows each engine series and goes with its pod."""

from __future__ import annotations

from pathlib import Path

from cycle_kit import NS, Rig, make_config

from watchdog.controller.signals import watched_workloads
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer

PER_ENGINE = "vllm_watchdog_engine_seconds_without_progress"
WORKLOAD_METRICS = ("vllm_watchdog_engines", "vllm_watchdog_stalls_total", "vllm_watchdog_deletions_total",
                    "vllm_watchdog_remediations_total", "vllm_watchdog_deferrals_total", "vllm_watchdog_quarantined",
                    "vllm_watchdog_quarantine_changes_total", "vllm_watchdog_quarantine_held_total")


def labelled(rig: Rig, name: str) -> list[dict[str, str]]:
    return [s.labels for f in rig.wd.metrics.registry.collect() for s in f.samples if s.name == name]


def test_workload_series_follow_the_opted_in_namespaces_and_the_per_engine_gauge_its_pods(
        emulator: EmulatorServer, tmp_path: Path) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    emulator.create_namespace("team-b", {NAMESPACE_LABEL: "dry-run"})
    rig = Rig(emulator, make_config(tmp_path, perEngineMetrics=True))
    try:
        wedged = rig.deployment("llama", rig.sim("127.0.0.2", "wedged"))["pod"]
        targets = {t.name for t in rig.wd.config.targets}
        seen: list[float] = []
        for _ in range(30):
            rig.cycle()
            pairs = {(s["namespace"], s["target"]) for n in WORKLOAD_METRICS for s in labelled(rig, n)}
            assert pairs == {(ns, t) for ns in (NS, "team-b") for t in targets}
            engines = labelled(rig, PER_ENGINE)
            if not rig.exists(wedged):
                break
            [series] = engines  # the one engine series of the one pod
            assert series["namespace"] == NS and series["pod"] == wedged["metadata"]["name"]
            assert series["target"] in targets
            seen.append(rig.wd.metrics.registry.get_sample_value(PER_ENGINE, series) or 0.0)
        assert not rig.exists(wedged), "the wedged pod was never deleted"
        assert max(seen) > 0 and seen == sorted(seen)  # its stall clock, rising until the deletion
        get = rig.wd.metrics.registry.get_sample_value
        workload = {"namespace": NS, "target": series["target"]}
        assert get("vllm_watchdog_deletions_total", {"action": "delete", **workload}) == 1.0
        assert get("vllm_watchdog_stalls_total", workload) == 1.0
        rig.cycle()
        assert labelled(rig, PER_ENGINE) == []  # the pod is gone: so is its series
        emulator.patch_object("/api/v1/namespaces/team-b", {"metadata": {"labels": {NAMESPACE_LABEL: None}}})
        rig.cycle()
        left = [s for n in WORKLOAD_METRICS for s in labelled(rig, n)]
        assert left and all(s["namespace"] == NS for s in left)  # team-b opted out: none of its series is left
    finally:
        rig.close()


def test_no_per_engine_series_unless_asked(emulator: EmulatorServer, tmp_path: Path) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "dry-run"})
    rig = Rig(emulator, make_config(tmp_path))
    try:
        rig.deployment("llama", rig.sim("127.0.0.2", "wedged"))
        for _ in range(3):
            rig.cycle()
        assert labelled(rig, PER_ENGINE) == [] and labelled(rig, "vllm_watchdog_engines")
    finally:
        rig.close()


def test_the_watched_pairs_are_the_opted_in_namespaces_x_targets_within_watch_namespaces() -> None:
    modes = {"team-a": "enforce", "team-b": "dry_run", "team-c": "enforce"}
    assert watched_workloads(modes, ["vllm", "sglang"]) == {(ns, t) for ns in modes for t in ("vllm", "sglang")}
    # namespace-only mode: an opted-in namespace not in watchNamespaces is never watched, so it has no series
    assert watched_workloads(modes, ["vllm"], ("team-a", "team-x")) == {("team-a", "vllm")}
