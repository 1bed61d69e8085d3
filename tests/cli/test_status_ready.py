"""``python -m watchdog status --ready`` (what the chart's ``helm test`` runs): one line from a real watchdog's /readyz
over loopback HTTP; exit 0 ready, 1 not ready with the reason (no cycle completed, a source that reads nothing), 2 no
usable answer."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import builders
import pytest
from served_kit import serving

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.cli.main import main
from watchdog.config.loader import load_config
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(emulator: EmulatorServer, tmp_path: Path) -> Iterator[tuple[Any, str, list[float]]]:
    """A watchdog on the emulator whose one pod's /metrics refuses every scrape, serving on 127.0.0.1; yields
    (watchdog, host:port, its fake clock: 15 s a cycle)."""
    emulator.create_namespace("llm", {NAMESPACE_LABEL: "true"})
    config = load_config(str(write_config(tmp_path / "c.yaml", **{
        **FAST_SETTINGS, "minPodAgeSeconds": 0, "scrapeDeadlineSeconds": 0.3, "connectTimeoutSeconds": 0.2})), env={})
    now = [0.0]
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host=emulator.base_url)), clock=lambda: now[0])
    seed_deployment(emulator, "llm", "mute", "127.0.0.2", free_port())
    with serving(wd, 15.0) as server:
        yield wd, f"127.0.0.1:{server.server_address[1]}", now


def cycles(wd: Any, now: list[float], n: int) -> None:
    for _ in range(n):
        now[0] += 15
        wd.run_cycle()


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in (out + err).splitlines() if line.startswith("vllm-watchdog status:")]
    assert len(lines) == 1, out + err
    return lines[0]


def test_ready_says_in_one_line_why_not_then_ready(served: tuple[Any, str, list[float]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    wd, address, now = served
    assert main(["status", "--ready", "--url", address]) == 1
    assert one_line(capsys) == "vllm-watchdog status: not ready: no cycle has completed yet"
    cycles(wd, now, 1)
    assert main(["status", "--ready", "--url", f"http://{address}/status"]) == 0
    assert one_line(capsys) == "vllm-watchdog status: ready: the last cycle completed 0.0 s ago"


def test_ready_fails_naming_the_source_that_reads_nothing(served: tuple[Any, str, list[float]],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    wd, address, now = served
    cycles(wd, now, 2)
    assert main(["status", "--ready", "--url", address]) == 0
    capsys.readouterr()
    cycles(wd, now, 1)
    assert main(["status", "--ready", "--url", address]) == 1
    line = one_line(capsys)
    assert line.startswith("vllm-watchdog status: not ready: source scrape (the pods' /metrics) has read no pod for 3 "
                           "cycles in a row (down after 3): all 1 reads of the last cycle failed, first: scrape of "
                           "http://127.0.0.2:")
    assert "refused" in line


def test_no_usable_answer_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--ready", "--url", f"127.0.0.1:{free_port()}", "--timeout", "2"]) == 2
    assert "(connection refused)" in one_line(capsys)

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)

    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        assert main(["status", "--ready", "--url", f"127.0.0.1:{other.server_address[1]}"]) == 2
        assert one_line(capsys).endswith("answered HTTP 404, not the watchdog's /readyz (is --url its listen address?)")
    finally:
        other.shutdown()
        other.server_close()


@pytest.mark.parametrize(("given", "url"), [
    ("fd00:10:96::a:8080", "http://[fd00:10:96::a]:8080/status"),  # an IPv6 *_SERVICE_HOST, bare
    ("[fd00:10:96::a]:8080", "http://[fd00:10:96::a]:8080/status"),
    ("10.96.0.10:8080", "http://10.96.0.10:8080/status"),
    ("$(VSW_SERVICE_HOST):$(VSW_SERVICE_PORT)", None),  # not expanded: no Service of that name when the Pod started
])  # fmt: skip
def test_the_url_the_helm_test_pod_gives(given: str, url: str | None) -> None:
    from watchdog.cli.status import status_url

    assert status_url(given) == url
