"""The run-time brake (watchdog/controller/brake.py) on the Kubernetes API emulator with simulated pods: the
annotation ``vllm-watchdog.io/paused`` on the watchdog's own ConfigMap defers every deletion (rule ``paused``, one
Event, ``vllm_watchdog_paused`` 1) without a restart; releasing it lets the deletion through; a failed read keeps
the last state (fail closed before the first read); a missing ConfigMap is no brake."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from cycle_kit import NS, Rig, make_config, remediated, sample
from fakes import FakeKube

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.controller.brake import Brake
from watchdog.controller.wiring import wire
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.core.policy import PAUSE_ANNOTATION
from watchdog.demo.emulator import EmulatorServer

HOME, NAME = "watchdog-system", "vsw"
CONFIG_MAP = f"/api/v1/namespaces/{HOME}/configmaps/{NAME}"


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    emulator.create_namespace(HOME)
    return emulator


def config_map(api: EmulatorServer, annotations: dict[str, str] | None = None) -> None:
    api.create_object(f"/api/v1/namespaces/{HOME}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yaml": "{}"},
        "metadata": {"name": NAME, "namespace": HOME, "annotations": annotations or {}}})


def annotate(api: EmulatorServer, value: str | None) -> None:
    api.patch_object(CONFIG_MAP, {"metadata": {"annotations": {PAUSE_ANNOTATION: value}}})


def braked_rig(api: EmulatorServer, tmp_path: Path, kube: Any = None) -> Rig:
    """``kube``: wraps the brake's client only (the watchdog's own reads, e.g. the ledger's, go to the emulator)."""
    inner = KubeClient.from_settings(KubeSettings(host=api.base_url, request_timeout_s=5))
    return Rig(api, make_config(tmp_path), kube=inner, brake=Brake(kube(inner) if kube else inner, HOME, NAME))


def deferred_events(api: EmulatorServer) -> list[str]:
    return [e["message"] for e in api.list_events(NS) if e["reason"] == "StalledPodDeletionDeferred"]


def test_the_annotation_defers_every_deletion_until_it_is_released(api: EmulatorServer, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    config_map(api)
    rig = braked_rig(api, tmp_path)
    try:
        pod = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))["pod"]
        ref = f"{NS}/{pod['metadata']['name']}"
        with caplog.at_level(logging.INFO, logger="watchdog.controller.brake"):
            assert [remediated(rig.cycle()) for _ in range(2)] == [[], []]
            assert sample(rig, "vllm_watchdog_paused") == 0.0
            annotate(api, "true")  # kubectl annotate configmap ... vllm-watchdog.io/paused=true --overwrite
            held = [rig.cycle() for _ in range(3)]  # stalled from the first of these on
            assert [remediated(r) for r in held] == [[(ref, "deferred")]] * 3
            assert {r.rule for report in held for _, r in report.remediations} == {"paused"}
            assert sample(rig, "vllm_watchdog_paused") == 1.0
            assert sample(rig, "vllm_watchdog_deferrals_total", {"rule": "paused"}) == 1.0  # once per episode
            assert sample(rig, "vllm_watchdog_remediations_total", {"result": "deferred"}) == 1.0  # once too (issue 30)
            messages = deferred_events(api)
            assert len(messages) == 2 and all(f"{PAUSE_ANNOTATION}=true on configmap {HOME}/{NAME}" in m
                                              for m in messages)  # pod and Deployment, once
            assert rig.exists(pod) and rig.wd.status is not None
            assert rig.wd.status.doc["policy"]["paused_why"] == f"annotation {PAUSE_ANNOTATION}=true on " \
                                                                f"configmap {HOME}/{NAME}"
            annotate(api, None)  # kubectl annotate configmap ... vllm-watchdog.io/paused-
            assert remediated(rig.cycle()) == [(ref, "deleted")]
        assert not rig.exists(pod) and sample(rig, "vllm_watchdog_paused") == 0.0
        said = [r.getMessage() for r in caplog.records]
        assert [m for m in said if m.startswith("run-time brake ON")] == [
            f"run-time brake ON (annotation {PAUSE_ANNOTATION}=true on configmap {HOME}/{NAME}): every deletion "
            "is deferred (rule paused) until it is removed"]  # once, not every cycle
        assert len([m for m in said if m.startswith("run-time brake off")]) == 2  # at start, and on release
    finally:
        rig.close()


def test_a_failed_read_keeps_the_last_state_and_the_first_read_fails_closed(api: EmulatorServer, tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    config_map(api)
    fakes: list[FakeKube] = []

    def failing(inner: KubeClient) -> FakeKube:
        fakes.append(FakeKube(inner))
        fakes[0].fail["get_config_map"] = KubeError("get configmap", 403, "Forbidden")
        return fakes[0]

    rig = braked_rig(api, tmp_path, kube=failing)
    try:
        pod = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))["pod"]
        with caplog.at_level(logging.INFO, logger="watchdog.controller.brake"):
            results = [remediated(rig.cycle()) for _ in range(4)]  # never read: the brake holds (fail closed)
            assert [r for r in results if r] == [[(f"{NS}/{pod['metadata']['name']}", "deferred")]] * 2
            assert "has not been read yet" in deferred_events(api)[0]
            assert sample(rig, "vllm_watchdog_paused") == 1.0
            del fakes[0].fail["get_config_map"]
            annotate(api, "true")
            rig.cycle()  # read: on
            fakes[0].fail["get_config_map"] = KubeError("get configmap", 0, "timeout")
            annotate(api, "false")  # released, but the watchdog cannot see it: it keeps the brake on
            assert [r.rule for _, r in rig.cycle().remediations] == ["paused"]
            del fakes[0].fail["get_config_map"]
            assert [r.result for _, r in rig.cycle().remediations] == ["deleted"]
        failures = [r for r in caplog.records if r.getMessage().startswith("cannot read the run-time brake")]
        assert [r.levelname for r in failures] == ["WARNING", "WARNING"]  # once per failure streak
        assert "keeping it ON until a read works" in failures[1].getMessage()
        assert fakes[0].calls["get_config_map"] == 5  # 4 failed reads, then 1 more
    finally:
        rig.close()


def test_no_such_config_map_is_no_brake(api: EmulatorServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = braked_rig(api, tmp_path)
    try:
        rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))
        with caplog.at_level(logging.WARNING, logger="watchdog.controller.brake"):
            results = [r.result for _ in range(3) for _, r in rig.cycle().remediations]
        assert results == ["deleted"] and sample(rig, "vllm_watchdog_paused") == 0.0
        assert [r.getMessage() for r in caplog.records if r.name == "watchdog.controller.brake"] == [
            f"the run-time brake's configmap {HOME}/{NAME} does not exist: no brake (set pauseConfigMap to an "
            "existing ConfigMap to be able to pause without a restart)"]
    finally:
        rig.close()


def test_the_setting_wires_the_brake_to_the_watchdogs_namespace(kube_client: KubeClient, tmp_path: Path) -> None:
    watchdog, _ = wire(make_config(tmp_path, pauseConfigMap=NAME), kube_client, HOME)
    try:
        assert watchdog.brake is not None and watchdog.brake.ref == f"configmap {HOME}/{NAME}"
        assert watchdog.policy.paused_by is not None  # until the first read
        assert watchdog.metrics.registry.get_sample_value("vllm_watchdog_paused") == 1.0
    finally:
        watchdog.close()
    unset, _ = wire(make_config(tmp_path), kube_client, HOME)
    try:
        assert unset.brake is None and unset.policy.paused_by is None
        assert unset.metrics.registry.get_sample_value("vllm_watchdog_paused") == 0.0
    finally:
        unset.close()
