"""The cycle's decision lines (watchdog/controller/cycle.py and the remediator it drives): each carries its facts
as fields, which the JSON format writes as top-level keys, and no message holds a Python repr. In process, on the
Kubernetes API emulator (kmock-based, real HTTP; not a cluster) with simulated pods on 127.0.0.x and a fake
monotonic clock advanced 15 s per cycle."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.adapters.logs import JsonFormatter
from watchdog.config.loader import load_config
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config
from watchdog.demo.simpod import SimPod

NS = "inference"


@pytest.fixture
def lines(emulator: EmulatorServer, tmp_path: Path,
          caplog: pytest.LogCaptureFixture) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Three cycles over one wedged and one idle pod (the wedged one is deleted in the third); yields the wedged
    pod and every watchdog log record of those cycles as the JSON formatter writes it."""
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    config = load_config(str(write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "minPodAgeSeconds": 0})),
                         env={})
    kube = KubeClient.from_settings(KubeSettings(host=emulator.base_url, request_timeout_s=5))
    now = [0.0]
    wd = builders.watchdog(config, kube, clock=lambda: now[0])
    with SimPod("127.0.0.2", 0, "wedged") as wedged, SimPod("127.0.0.3", 0, "idle") as idle:
        pod = seed_deployment(emulator, NS, "wedged", wedged.address, wedged.port)["pod"]
        seed_deployment(emulator, NS, "idle", idle.address, idle.port)
        with caplog.at_level(logging.DEBUG, logger="watchdog"):
            for _ in range(3):
                now[0] += 15.0
                wd.run_cycle()
        wd.close()
    formatter = JsonFormatter()
    yield pod, [json.loads(formatter.format(r)) for r in caplog.records if r.name.startswith("watchdog.")]


def test_a_state_change_names_the_series_and_carries_its_facts(
        lines: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    pod, records = lines
    meta = pod["metadata"]
    changes = [r for r in records if " -> " in r["msg"] and r.get("pod") == meta["name"]]
    assert [r["state"] for r in changes] == ["suspect", "stalled"]
    stalled = changes[-1]
    key = stalled["engine"]
    assert key.startswith('engine="0"')
    assert {k: stalled[k] for k in ("namespace", "pod", "uid", "state")} == {
        "namespace": NS, "pod": meta["name"], "uid": meta["uid"], "state": "stalled"}
    # "suspect -> stalled: 21 requests running ...": the state is said once (not "stalled: stalled:").
    assert stalled["msg"] == f"pod {NS}/{meta['name']} series {{{key}}}: suspect -> {stalled['reason']}"
    assert stalled["reason"].startswith("stalled: 21 requests running")
    assert changes[0]["msg"].startswith(f"pod {NS}/{meta['name']} series {{{key}}}: new -> suspect (first busy")


def test_the_remediation_outcome_carries_pod_engine_and_result(
        lines: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    pod, records = lines
    (outcome,) = [r for r in records if r["msg"].startswith("remediation ")]
    assert {k: outcome[k] for k in ("level", "namespace", "pod", "uid", "state", "result")} == {
        "level": "warning", "namespace": NS, "pod": pod["metadata"]["name"], "uid": pod["metadata"]["uid"],
        "state": "stalled", "result": "deleted"}
    assert outcome["engine"].startswith('engine="0"') and "rule" not in outcome
    assert outcome["msg"] == f"remediation deleted: {outcome['reason']}"


def test_the_cycle_summary_counts_in_words_and_as_json_objects(
        lines: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    _, records = lines
    summaries = [r for r in records if r["msg"].startswith("cycle done:")]
    assert len(summaries) == 3
    last = summaries[-1]
    assert last["msg"].startswith("cycle done: 2 pods, engines idle=1 stalled=1, scrapes ok=2, skipped none, "
                                  "opted-in namespaces enforce=1, remediations deleted=1, ")
    assert (last["engines"], last["scrapes"], last["remediations"], last["pods"]) == (
        {"idle": 1, "stalled": 1}, {"ok": 2}, {"deleted": 1}, 2)
    for record in records:  # no Python repr of a dict, a Counter or None in any message
        assert not any(text in record["msg"] for text in ("{'", "Counter(", "None")), record["msg"]
