"""Bodies rendered by the engines' OWN metric code (vLLM 0.33.0 and 0.34.0, SGLang 0.5.23, LMDeploy 0.18.0;
tests/fixtures/render_engines.py, run on demand) give the expected verdicts, in both sources (issues 31 item 2, 41):

- direct scraping: ``replay --expositions DIR`` (the path ``run`` takes with a scraped body);
- the Prometheus source: every body stored as Prometheus stores a scrape (tests/promfake.py), read back through
  the watchdog's queries (:mod:`watchdog.core.promql`) and fed as ``run`` feeds a pod with ``source: prometheus``
  (each engine series at its own sample time, once per time: ``PodRecord.observe`` with stamps).

tests/fixtures/engines/expected.json holds each scenario's rules, written from what the engine was doing (sleep
and RL weight updates: ``paused``, never ``stalled``; a wedged data-parallel engine or rank: ``stalled``, its
sibling ``progressing``; a long chunked prefill: ``progressing``; a fresh SGLang server: ``idle``; vLLM 0.34's
checkpoint keep-mode pause: ``stalled`` by every rule, ``paused`` with the pod's vllm-watchdog.io/paused-until
annotation over it -- a scenario with ``annotation`` is fed as the cycle feeds such a pod; its ``/release_kv_cache_
memory``: ``paused``; a KV consumer whose only waiting requests are KV loads: ``idle``; LMDeploy: decoding
``progressing``, a wedge ``stalled``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.promfake import FakePrometheus, pod_reading
from watchdog.cli.main import main
from watchdog.controller.state import PodRecord
from watchdog.core.detector import DEFAULT_MIN_SAMPLES, DetectorState
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import get_profile

ENGINES = Path(__file__).parents[1] / "fixtures" / "engines"
EXPECTED: dict[str, dict[str, Any]] = json.loads((ENGINES / "expected.json").read_text())
TARGET = {"namespace": "n", "pod": "p", "job": "engine", "instance": "10.0.0.1:8000"}
EPOCH = 1_800_000_000.0  # Unix seconds of the recording's t = 0 in the fake Prometheus


def rows_by_scrape(capsys: pytest.CaptureFixture[str], case: str) -> list[tuple[float, dict[str, str], str]]:
    spec = EXPECTED[case]
    if "annotation" in spec:  # replay has no pod to annotate: each body parsed and fed as run feeds a scrape
        return rows_by_parsing(case)
    code = main(["replay", "--expositions", str(ENGINES / case), "--profile", spec["profile"], "--window",
                 str(spec["window"])])
    out, _ = capsys.readouterr()
    assert code == 0
    return [(r["t"], r["series"], r["state"]) for r in map(json.loads, out.splitlines())]


def bodies(case: str) -> Iterator[tuple[float, str]]:
    """The recording of ``case`` (another scenario's when it says ``bodies``), in time order."""
    for path in sorted((ENGINES / EXPECTED[case].get("bodies", case)).glob("*.prom"), key=lambda p: float(p.stem)):
        yield float(path.stem), path.read_text()


def paused_by(case: str, t: float) -> str:
    """Why the pod's pause annotation holds at ``t`` in ``case`` ("" outside its ``annotation`` span), as the
    cycle passes it (watchdog.controller.cycle: ``Watchdog._pause``)."""
    span = EXPECTED[case].get("annotation")
    return "its pod's annotation holds it paused" if span and span[0] <= t <= span[1] else ""


def rows_by_parsing(case: str) -> list[tuple[float, dict[str, str], str]]:
    """The verdicts of ``case``, each body parsed and fed at its scrape time with the pod's pause annotation as
    the cycle passes it (``PodRecord.observe``, the path ``run`` and ``replay --expositions`` share)."""
    spec = EXPECTED[case]
    profile, window = get_profile(spec["profile"]), float(spec["window"])
    pod = PodRecord(restart_count=0, first_seen=0.0)
    out: list[tuple[float, dict[str, str], str]] = []
    for t, body in bodies(case):
        _, seen = pod.observe(t, parse_exposition(body, profile), window, lambda: DetectorState(
            window, min_samples=DEFAULT_MIN_SAMPLES, signals=profile.progress), paused_by=paused_by(case, t))
        out += [(t, dict(s.engine.last.labels) if s.engine.last else {}, s.verdict.state) for s in seen]
    return out


def rows_by_prometheus(case: str) -> list[tuple[float, dict[str, str], str]]:
    spec = EXPECTED[case]
    profile, window = get_profile(spec["profile"]), float(spec["window"])
    pod = PodRecord(restart_count=0, first_seen=0.0)
    out: list[tuple[float, dict[str, str], str]] = []
    with FakePrometheus() as prom:
        for t, body in bodies(case):
            prom.feed(body, TARGET, EPOCH + t)
            reading = pod_reading(profile, list(prom.series.items()), EPOCH + t + 1.0)
            if reading is None or reading.t is None:
                continue  # no series of the profile in Prometheus yet: nothing to judge, as a scrape of it
            stamps = {labels: None if labels in reading.moved else stamp - EPOCH
                      for labels, stamp in reading.times.items()}  # as promsource.fleet_reads
            _, seen = pod.observe(t, reading.parsed, window, lambda: DetectorState(
                window, min_samples=DEFAULT_MIN_SAMPLES, signals=profile.progress), stamps, 4 * window,
                paused_by(case, t))
            out += [(t, dict(s.engine.last.labels) if s.engine.last else {}, s.verdict.state) for s in seen]
    return out


def check(case: str, rows: list[tuple[float, dict[str, str], str]]) -> None:
    assert rows, case
    for rule in EXPECTED[case]["rules"]:
        judged = [(t, state) for t, series, state in rows
                  if rule["from"] <= t <= rule["to"] and rule["series"].items() <= series.items()]
        assert judged, (case, rule)  # every rule is about verdicts that exist
        wrong = [(t, state) for t, state in judged if state not in rule["states"]]
        assert not wrong, (case, rule["series"], rule["states"], wrong)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_engine_rendered_bodies_by_scraping(capsys: pytest.CaptureFixture[str], case: str) -> None:
    check(case, rows_by_scrape(capsys, case))


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_engine_rendered_bodies_through_prometheus(case: str) -> None:
    check(case, rows_by_prometheus(case))


@pytest.mark.parametrize("case", ["vllm-sleep-level1", "vllm-sleep-level2", "vllm-rl-weight-update"])
def test_sleep_and_weight_updates_are_paused_never_stalled_in_both_sources(capsys: pytest.CaptureFixture[str],
                                                                           case: str) -> None:
    for rows in (rows_by_scrape(capsys, case), rows_by_prometheus(case)):
        states = [state for _, _, state in rows]
        assert "stalled" not in states and states.count("paused") >= 7  # 105 s or more at 15 s scrapes


def test_every_scenario_directory_has_its_expectations_and_the_fixtures_stay_small() -> None:
    directories = {p.name for p in ENGINES.iterdir() if p.is_dir()}
    assert directories == {name for name, spec in EXPECTED.items() if "bodies" not in spec}
    assert sum(p.stat().st_size for p in ENGINES.rglob("*.prom")) < 9_000_000  # about 7.7 MB: 15 recordings


DYNAMO = ('dynamo_component="backend",dynamo_endpoint="generate",dynamo_namespace="dynamo",model="Qwen/Qwen3-8B",'
          'worker_id="7587889712474989333"')


def dynamo_labelled(body: str) -> str:
    """``body`` as NVIDIA Dynamo 1.6.1's vLLM worker serves it: its worker_id, dynamo_namespace/component/endpoint
    and model labels added to every engine series (issue 41 item 4)."""
    lines = []
    for line in body.splitlines():
        if line.startswith("vllm:") and "{" in line:
            line = line.replace("{", "{" + DYNAMO + ",", 1)
        elif line.startswith("vllm:"):
            name, _, value = line.partition(" ")
            line = f"{name}{{{DYNAMO}}} {value}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("case", ["vllm-dp2-engine1-wedged", "vllm-sleep-level1", "vllm034-release-kv-cache"])
def test_dynamo_labels_on_every_series_leave_the_engine_series_and_their_values_as_they_are(case: str) -> None:
    """Dynamo's extra labels are summed over (one worker per body): the same engine series, keyed by engine and
    model_name, with the same running, waiting, progress and paused values as the plain body."""
    profile = get_profile("vllm")
    for _, body in bodies(case):
        plain, dynamo = parse_exposition(body, profile), parse_exposition(dynamo_labelled(body), profile)
        assert [(s.labels, s.running, s.waiting, s.progress, s.paused) for s in dynamo.series] == [
            (s.labels, s.running, s.waiting, s.progress, s.paused) for s in plain.series]
        assert plain.series and not dynamo.skipped_lines
