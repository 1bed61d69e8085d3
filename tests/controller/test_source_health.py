"""Source health through the real cycle (issue 30 item 4): an unreachable Prometheus, or no pod's /metrics reachable,
for 3 cycles in a row sets ``vllm_watchdog_source_up{source}`` to 0 and makes /readyz 503 naming the source and what
failed; one cycle that reads a pod makes it up again. One tenant's pods all down while another pod answers is not a
source failure. The Kubernetes API emulator (kmock, real HTTP; not a cluster), a loopback fake of Prometheus'
query API (tests/promfake.py) and simulated pods; a fake clock moving 15 s a cycle."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cycle_kit import NS, Rig, make_config, sample
from run_kit import get

from tests.promfake import FakePrometheus
from watchdog.controller import http
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

BASE = 1_700_000_000.0


class PromRig(Rig):
    """A watchdog with ``source: prometheus`` at ``url``; Prometheus' clock is the fake clock plus BASE."""

    def __init__(self, api: EmulatorServer, tmp_path: Path, url: str) -> None:
        super().__init__(api, make_config(tmp_path, source="prometheus", prometheusUrl=url,
                                          prometheusTimeoutSeconds=0.8), wall_clock=lambda: BASE + self.now)

    def engine(self, prom: FakePrometheus, pod: dict[str, Any]) -> None:
        """One busy, progressing sample of ``pod``'s engine in ``prom`` (scraped from its IP), 5 s before the next
        cycle's query."""
        labels = {"namespace": NS, "pod": pod["metadata"]["name"], "engine": "0", "model_name": "m",
                  "instance": f"{pod['status']['podIP']}:8000"}
        prom.add("vllm:num_requests_running", labels, BASE + self.now + 10.0, 1)
        prom.add("vllm:generation_tokens_total", labels, BASE + self.now + 10.0, self.now)


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as fake:
        yield fake


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The rig's watchdog serving /readyz on 127.0.0.1 (interval 15 s, the fake clock's step)."""

    def __init__(self, rig: Rig) -> None:
        self.server = http.start_http("127.0.0.1:0", rig.wd, 15.0)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def readyz(self) -> tuple[int, dict[str, Any]]:
        status, _, body = get(self.base, "/readyz")
        return status, json.loads(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def up(rig: Rig, source: str) -> tuple[float | None, float | None]:
    return (sample(rig, "vllm_watchdog_source_up", {"source": source}),
            sample(rig, "vllm_watchdog_source_failed_cycles", {"source": source}))


def test_an_unreachable_prometheus_is_down_after_3_cycles_metric_and_readyz_name_it(
        emulator: EmulatorServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's case: a well-formed prometheusUrl where nothing listens. Cycles complete (every engine unknown),
    /healthz stays 200, and from the third cycle /readyz is 503 naming the source, its URL and the refusal."""
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    url = f"http://127.0.0.1:{closed_port()}"
    rig = PromRig(emulator, tmp_path, url)
    served = Served(rig)
    try:
        seed_deployment(emulator, NS, "a", "127.0.0.2", 8000)
        assert up(rig, "prometheus") == (1.0, 0.0)  # from the start, before any cycle
        assert up(rig, "scrape") == (None, None)  # only the sources in use have a series
        with caplog.at_level(logging.INFO, logger="watchdog.controller.cycle"):
            for n in (1, 2):
                assert rig.cycle().scrapes == {"prometheus_error": 1}
                assert up(rig, "prometheus") == (1.0, float(n)) and served.readyz()[0] == 200
            rig.cycle()
            rig.cycle()
        downs = [r for r in caplog.records if getattr(r, "reason", "") == "source_down"]
        assert up(rig, "prometheus") == (0.0, 4.0)
        assert len(downs) == 1 and downs[0].levelno == logging.ERROR  # logged once, when it went down
        status, body = served.readyz()
        assert status == 503 and body["ready"] is False and body["seconds_since_completed"] == 0
        assert body["why"].startswith(f"source prometheus ({url}) has read no pod for 4 cycles in a row (down after "
                                      f"3): all 1 reads of the last cycle failed, first: reading it from Prometheus: "
                                      f"Prometheus {url}")
        assert "unreachable" in body["why"] and "\n" not in body["why"]
        assert get(served.base, "/healthz")[0] == 200  # the loop is alive: nothing to restart
    finally:
        served.close()
        rig.close()


def test_prometheus_answering_again_makes_it_up_at_the_first_cycle(emulator: EmulatorServer, tmp_path: Path,
                                                                     prom: FakePrometheus) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    rig = PromRig(emulator, tmp_path, prom.url)
    served = Served(rig)
    try:
        pod = seed_deployment(emulator, NS, "a", "127.0.0.2", 8000)["pod"]
        prom.fail = (503, b"Service Unavailable")
        for _ in range(3):
            rig.cycle()
        status, body = served.readyz()
        assert up(rig, "prometheus") == (0.0, 3.0) and status == 503 and "HTTP 503" in body["why"]
        prom.fail = None
        rig.engine(prom, pod)
        assert rig.cycle().scrapes == {"ok": 1}
        assert up(rig, "prometheus") == (1.0, 0.0) and served.readyz()[0] == 200
        prom.fail = (503, b"Service Unavailable")
        for _ in range(2):
            rig.cycle()
        assert up(rig, "prometheus") == (1.0, 2.0)  # counted again from 0
    finally:
        served.close()
        rig.close()


def test_with_no_pod_due_prometheus_is_probed_and_a_wrong_url_shows_on_a_fresh_install(
        emulator: EmulatorServer, tmp_path: Path, prom: FakePrometheus) -> None:
    """Issue 30 item 4's done-when: a prometheusUrl pointing nowhere fails /readyz (and so helm test) before any
    namespace is opted in: with no pod due the source is probed with one constant query (vector(1)); a Prometheus
    that answers it keeps the source up."""
    (tmp_path / "wrong").mkdir()
    (tmp_path / "right").mkdir()
    wrong = PromRig(emulator, tmp_path / "wrong", f"http://127.0.0.1:{closed_port()}")
    right = PromRig(emulator, tmp_path / "right", prom.url)
    try:
        for _ in range(3):
            assert wrong.cycle().pods == 0 and right.cycle().pods == 0
        assert up(wrong, "prometheus") == (0.0, 3.0)
        why = wrong.wd.source_down()
        assert why is not None and "all 1 reads of the last cycle failed, first: reading it from Prometheus" in why
        assert "unreachable" in why
        assert up(right, "prometheus") == (1.0, 0.0) and right.wd.source_down() is None
        assert {q for q, _ in prom.queries} == {"vector(1)"}
    finally:
        wrong.close()
        right.close()


def test_scraping_with_no_pod_due_is_no_evidence(emulator: EmulatorServer, tmp_path: Path) -> None:
    """Scraping has nothing to reach without a pod: a fresh install's scrape source stays up, not judged."""
    rig = Rig(emulator, make_config(tmp_path))
    try:
        for _ in range(4):
            assert rig.cycle().pods == 0
        assert up(rig, "scrape") == (1.0, 0.0) and rig.wd.source_down() is None
    finally:
        rig.close()


def test_no_pods_metrics_reachable_is_scrape_down_and_one_answering_pod_keeps_it_up(
        emulator: EmulatorServer, tmp_path: Path) -> None:
    """Tenant a's two pods refuse every scrape. While tenant b's pod answers, scraping is up (tenant a's pods are
    unknown, its namespace breaker's business); once b's pod stops answering too, scraping is down after 3 cycles."""
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    emulator.create_namespace("tenant-b", {NAMESPACE_LABEL: "true"})
    rig = Rig(emulator, make_config(tmp_path, connectTimeoutSeconds=0.3, scrapeDeadlineSeconds=0.5))
    served = Served(rig)
    port = closed_port()
    try:
        seed_deployment(emulator, NS, "a1", "127.0.0.2", port)
        seed_deployment(emulator, NS, "a2", "127.0.0.3", port)
        answering = rig.sim("127.0.0.4", "progressing")
        seed_deployment(emulator, "tenant-b", "b", answering.address, answering.port)
        for _ in range(4):
            report = rig.cycle()
        assert report.scrapes == {"refused": 2, "ok": 1}
        assert up(rig, "scrape") == (1.0, 0.0) and served.readyz()[0] == 200
        answering.stop()
        for _ in range(3):
            report = rig.cycle()
        assert report.scrapes == {"refused": 3}
        status, body = served.readyz()
        assert up(rig, "scrape") == (0.0, 3.0) and status == 503
        assert body["why"].startswith("source scrape (the pods' /metrics) has read no pod for 3 cycles in a row (down "
                                      "after 3): all 3 reads of the last cycle failed, first: scrape of "
                                      "http://127.0.0.")
        assert f":{port}/metrics: " in body["why"] and "refused" in body["why"]
        assert up(rig, "prometheus") == (None, None)
    finally:
        served.close()
        rig.close()
