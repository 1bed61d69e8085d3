"""The ``run`` verb: exit codes (as a separate process), the HTTP endpoints, help text and the start-up log."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import builders
import pytest
from run_kit import REPO, clean_env, get, rest_of, serving_address, start_run
from served_kit import ipv6_loopback, serving

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.cli import run as run_verb
from watchdog.config.loader import load_config
from watchdog.config.settings import SETTINGS
from watchdog.controller import service
from watchdog.controller.cycle import Watchdog
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m watchdog run ARGS`` with no WATCHDOG_* variables from the outside."""
    return subprocess.run([sys.executable, "-m", "watchdog", "run", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**clean_env(), **(env or {})})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(emulator: EmulatorServer, tmp_path: Path) -> Iterator[tuple[EmulatorServer, Path, Path]]:
    """The emulator with one opted-in namespace and one idle pod; yields (emulator, kubeconfig, config)."""
    emulator.create_namespace("inference", {NAMESPACE_LABEL: "true"})
    with SimPod("127.0.0.2", 0, "idle") as sim:
        seed_deployment(emulator, "inference", "llama", sim.address, sim.port)
        yield (emulator, write_kubeconfig(tmp_path / "kubeconfig", emulator.base_url),
               write_config(tmp_path / "config.yaml", **FAST_SETTINGS))


# -- exit codes, as a separate process --------------------------------------------------------------------------
@pytest.mark.e2e  # a `watchdog` process of its own
def test_run_once_does_one_cycle_and_exits_0(cluster: tuple[EmulatorServer, Path, Path]) -> None:
    api, kubeconfig, config = cluster
    done = run("--once", "--kubeconfig", str(kubeconfig), "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "cycle done: 1 pods" in done.stderr
    assert "effective configuration" in done.stderr
    assert "DRY-RUN" not in done.stderr and "Traceback" not in done.stderr
    # namespaces and pods per default target (2); the deletion budget is restored with one GET of the ledger,
    # never with an Event LIST
    assert api.emulator.count_requests(verb="list") == 3
    assert api.emulator.count_requests(verb="list", resource="events") == 0
    assert api.emulator.count_requests(verb="delete") == 0


@pytest.mark.e2e  # a `watchdog` process of its own
def test_dry_run_banner_is_logged(cluster: tuple[EmulatorServer, Path, Path]) -> None:
    _, kubeconfig, config = cluster
    done = run("--once", "--dry-run", "--kubeconfig", str(kubeconfig), "--config", str(config))
    assert done.returncode == 0, done.stderr
    banner = [line for line in done.stderr.splitlines() if "DRY-RUN" in line]
    assert len(banner) == 1 and "WARNING" in banner[0] and "nothing will be deleted" in banner[0]


@pytest.mark.e2e  # a `watchdog` process of its own
def test_bad_configuration_exits_2_with_every_problem_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("logFormat: text\nwindowSecond: 300\n")
    done = run("--window-seconds", "abc", "--config", str(config), env={"WATCHDOG_MIN_SAMPLES": "0"})
    assert done.returncode == 2
    [line] = done.stderr.splitlines()  # in the configured format (text here); tests/cli/test_run.py: json too
    assert line.endswith(" ERROR   watchdog.cli.run: configuration refused, 3 problems: "
                         f"{config}:2 key 'windowSecond': unknown setting (did you mean 'windowSeconds'?); "
                         "env WATCHDOG_MIN_SAMPLES: '0' is below the minimum 1; "
                         "--window-seconds: 'abc' is not a number"), line
    assert done.stdout == ""


@pytest.mark.e2e  # a `watchdog` process of its own
def test_unreachable_api_with_once_exits_1_without_traceback(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    config = write_config(tmp_path / "config.yaml", **FAST_SETTINGS)
    done = run("--once", "--kubeconfig", str(kubeconfig), "--config", str(config), "--api-timeout-seconds", "2")
    assert done.returncode == 1
    assert "cycle failed: list namespaces" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.e2e  # a `watchdog` process of its own
def test_unusable_kubeconfig_exits_2(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", **FAST_SETTINGS)
    done = run("--once", "--kubeconfig", str(tmp_path / "missing"), "--config", str(config))
    assert done.returncode == 2
    assert "cannot set up the Kubernetes client" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.e2e  # a `watchdog` process of its own
@pytest.mark.parametrize("address", ["127.0.0.1:0", "[::1]:0"])
def test_run_serves_the_endpoints_and_stops_cleanly_on_sigterm(cluster: tuple[EmulatorServer, Path, Path],
                                                               address: str) -> None:
    if address.startswith("[") and not ipv6_loopback():
        pytest.skip("this kernel has no IPv6 loopback (::1)")
    _, kubeconfig, config = cluster
    with start_run("--kubeconfig", str(kubeconfig), "--config", str(config), "--listen-address",
                   address) as (proc, lines):
        base = f"http://{serving_address(lines)}"
        assert base.startswith(f"http://{address[:-2]}:")
        deadline = time.monotonic() + 20  # a generous bound: the first cycle starts at once
        while get(base, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "no cycle completed"
            time.sleep(0.05)
        assert get(base, "/healthz")[0] == 200
        assert "vllm_watchdog_pods_watched 1.0" in get(base, "/metrics")[2].decode().splitlines()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    rest = rest_of(lines)
    assert any("INFO" in line and "stopping (SIGTERM)" in line for line in rest)
    assert not any("Traceback" in line for line in rest)


@pytest.mark.e2e  # a `watchdog` process of its own
@pytest.mark.parametrize("deadline_s", [3.0, 50.0], ids=["cycle-ends-within-the-wait", "cycle-stuck-past-it"])
def test_sigterm_during_a_cycle_is_a_clean_stop(emulator: EmulatorServer, tmp_path: Path, deadline_s: float) -> None:
    """Two pods that never answer, one scrape worker: SIGTERM arrives while the first scrape hangs and the second
    waits. A cycle that ends within service.STOP_WAIT_S is waited for; one stuck past it is left behind. Either
    way: exit 0 within the bound, no ERROR "cycle failed", no traceback (was: CancelledError from the cancelled
    scrape, and a stop as long as the scrape deadline)."""
    emulator.create_namespace("inference", {NAMESPACE_LABEL: "true"})
    with SimPod("127.0.0.2", 0, "hang") as one, SimPod("127.0.0.3", 0, "hang") as two:
        seed_deployment(emulator, "inference", "one", one.address, one.port)
        seed_deployment(emulator, "inference", "two", two.address, two.port)
        config = write_config(tmp_path / "config.yaml", **{
            **FAST_SETTINGS, "scrapeIntervalSeconds": 60.0, "windowSeconds": 180.0, "workers": 1,
            "scrapeDeadlineSeconds": deadline_s, "connectTimeoutSeconds": 1.0})
        with start_run("--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", emulator.base_url)),
                       "--config", str(config)) as (proc, lines):
            serving_address(lines)
            deadline = time.monotonic() + 20
            while emulator.emulator.count_requests(verb="list", resource="pods") < 2:  # discovery done
                assert time.monotonic() < deadline, "no cycle started"
                time.sleep(0.05)
            time.sleep(0.5)  # the first scrape hangs, the second waits for the worker
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=service.STOP_WAIT_S + 15) == 0
            took = time.monotonic() - sent
    rest = rest_of(lines)
    text = "".join(rest)
    assert "Traceback" not in text and "cycle failed" not in text and "ERROR" not in text, text
    assert any("INFO" in line and "stopping (SIGTERM)" in line for line in rest)
    if deadline_s > service.STOP_WAIT_S:
        assert "a cycle was still running" in text and took < service.STOP_WAIT_S + 10
    else:
        assert "cycle done: 2 pods" in text and "scrapes timeout=2" in text


def test_a_cycle_cut_short_by_the_stop_is_not_a_failure(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:1",
                                                                         request_timeout_s=2)))
    runner = service.CycleRunner(wd)
    caplog.set_level(logging.INFO, logger="watchdog.controller.service")
    try:
        wd.run_cycle = lambda: (_ for _ in ()).throw(CancelledError())  # type: ignore[method-assign]
        runner.stopping.set()
        service.safe_cycle(wd, runner.stopping)
        runner()  # stopping: starts no cycle at all
        assert wd.metrics.registry.get_sample_value("vllm_watchdog_cycle_failures_total") == 0.0
        assert [r.levelname for r in caplog.records] == ["INFO"]
        assert "cycle cut short by the shutdown: CancelledError" in caplog.text
        assert runner.stop(0.1)  # nothing in progress
    finally:
        wd.close()


# -- help ------------------------------------------------------------------------------------------------------
def test_run_help_lists_every_env_var_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    parser = argparse.ArgumentParser(prog="vllm-watchdog")
    run_verb.add_parser(parser.add_subparsers())
    text = parser._subparsers._group_actions[0].choices["run"].format_help()  # type: ignore[union-attr]
    missing = [s.env for s in SETTINGS if s.env not in text] + [s.flag for s in SETTINGS if s.flag not in text]
    assert missing == []
    for extra in ("WATCHDOG_CONFIG", "WATCHDOG_TARGETS", "--once", "Exit status"):
        assert extra in text


# -- HTTP endpoints --------------------------------------------------------------------------------------------
@pytest.fixture
def served(emulator: EmulatorServer, tmp_path: Path) -> Iterator[tuple[Watchdog, str, Any]]:
    emulator.create_namespace("inference", {NAMESPACE_LABEL: "true"})
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host=emulator.base_url)))
    with serving(wd, 1.0) as server:
        yield wd, f"http://127.0.0.1:{server.server_address[1]}", server


def test_readyz_is_503_until_a_cycle_completed(served: tuple[Watchdog, str, Any]) -> None:
    wd, base, _ = served
    status, ctype, body = get(base, "/readyz")
    assert (status, ctype, json.loads(body)) == (503, "application/json", {
        "ready": False, "why": "no cycle has completed yet", "seconds_since_completed": None})
    wd.run_cycle()
    status, _, body = get(base, "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True and "why" not in json.loads(body)


def test_healthz_follows_the_age_of_the_last_cycle_start(served: tuple[Watchdog, str, Any]) -> None:
    wd, base, server = served
    assert get(base, "/healthz")[0] == 200  # just started: within 3 intervals of the start
    server.app.started = time.monotonic() - 10  # started long ago, never a cycle
    status, _, body = get(base, "/healthz")
    assert status == 503 and json.loads(body)["ok"] is False
    wd.run_cycle()
    status, _, body = get(base, "/healthz")
    assert status == 200 and json.loads(body)["ok"] is True
    wd.last_started = time.monotonic() - 3.5  # more than 3 intervals of 1 s ago
    status, _, body = get(base, "/healthz")
    assert status == 503
    reply = json.loads(body)
    assert reply["ok"] is False and reply["seconds_since_cycle_start"] >= 3.5 and reply["limit_s"] == 3.0
    wd.last_started = time.monotonic() - 2.0
    assert get(base, "/healthz")[0] == 200


def test_metrics_endpoint_serves_the_watchdog_metrics(served: tuple[Watchdog, str, Any]) -> None:
    wd, base, _ = served
    wd.run_cycle()
    status, ctype, body = get(base, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    text = body.decode()
    for line in ("vllm_watchdog_pods_watched 0.0",
                 'vllm_watchdog_remediations_total{namespace="inference",result="deleted",target="vllm"} 0.0',
                 'vllm_watchdog_deletions_total{action="delete",namespace="inference",target="vllm"} 0.0',
                 "vllm_watchdog_paused 0.0",
                 'vllm_watchdog_scrapes_total{outcome="timeout"} 0.0',
                 'vllm_watchdog_engines{namespace="inference",state="stalled",target="vllm"} 0.0',
                 "vllm_watchdog_cycle_duration_seconds_count 1.0", "vllm_watchdog_event_failures_total 0.0",
                 "vllm_watchdog_cycle_failures_total 0.0"):
        assert line in text.splitlines()
    assert "vllm_watchdog_last_cycle_timestamp_seconds" in text
    assert "python_gc" not in text  # its own registry, not the process-global one
    assert get(base, "/nope")[0] == 404


def test_safe_cycle_logs_and_counts_a_failure(tmp_path: Path) -> None:
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    kube = KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{closed_port()}", request_timeout_s=2))
    wd = builders.watchdog(config, kube)
    try:
        service.safe_cycle(wd)  # never raises
        service.safe_cycle(wd)
        assert wd.metrics.registry.get_sample_value("vllm_watchdog_cycle_failures_total") == 2.0
        assert wd.last_success is None and wd.last_started is not None  # started (alive), never completed
        assert wd.last_failure is not None and wd.last_failure[1].startswith("list namespaces ")
    finally:
        wd.close()


@pytest.mark.e2e  # a `watchdog` process of its own
@pytest.mark.parametrize("content", [None, "this: is: not: kubeconfig", "clusters: 5", "[1, 2]", "context: 7"])
def test_an_unusable_kubeconfig_is_one_line_and_exit_2(tmp_path: Path, content: str | None) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    done = run("--once", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [json.loads(ln)["msg"] for ln in done.stderr.splitlines() if json.loads(ln)["level"] == "error"]
    assert "load configuration" in line and "kubeconfig" in line
    if content is None:
        assert line.endswith("no such file")


@pytest.mark.e2e  # a `watchdog` process of its own
def test_a_listen_address_in_use_is_one_line_and_exit_2(cluster: tuple[EmulatorServer, Path, Path]) -> None:
    _, kubeconfig, config = cluster
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run("--kubeconfig", str(kubeconfig), "--config", str(config), "--listen-address", f"127.0.0.1:{port}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port} (listenAddress): Address already in use" in done.stderr


@pytest.mark.e2e  # a `watchdog` process of its own
def test_typo_in_an_env_var_is_warned_about(cluster: tuple[EmulatorServer, Path, Path]) -> None:
    _, kubeconfig, config = cluster
    done = run("--once", "--kubeconfig", str(kubeconfig), "--config", str(config),
               env={"WATCHDOG_WINDOW_SECNDS": "60"})
    assert done.returncode == 0
    assert "WATCHDOG_WINDOW_SECNDS is not a setting and is ignored (did you mean 'WATCHDOG_WINDOW_SECONDS'?)" \
        in done.stderr


@pytest.mark.e2e  # a `watchdog` process of its own
def test_empty_cluster_and_meaningless_opt_in_values_are_explained(emulator: EmulatorServer, tmp_path: Path) -> None:
    emulator.create_namespace("llm", {NAMESPACE_LABEL: "yes"})
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.base_url)
    config = write_config(tmp_path / "config.yaml", **FAST_SETTINGS)
    done = run("--once", "--kubeconfig", str(kubeconfig), "--config", str(config))
    assert done.returncode == 0
    assert 'namespace llm has vllm-watchdog.io/enabled="yes", which is neither' in done.stderr
    assert "no opted-in namespace (label one vllm-watchdog.io/enabled=dry-run or =true)" in done.stderr


def test_a_cycle_longer_than_the_interval_is_a_warning_with_what_helps(caplog: pytest.LogCaptureFixture) -> None:
    """apscheduler only says 'skipped: maximum number of running instances reached'; the runner says why."""
    from types import SimpleNamespace

    from watchdog.controller.service import CycleRunner

    now = [0.0]

    def slow_cycle() -> None:
        now[0] += 7.5

    fake = SimpleNamespace(clock=lambda: now[0], run_cycle=slow_cycle, fanout=SimpleNamespace(size=32),
                           config=SimpleNamespace(scrape_interval_seconds=5.0, workers=32))
    runner = CycleRunner(fake)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="watchdog.controller.service"):
        runner()
    (record,) = [r for r in caplog.records if "longer than the" in r.getMessage()]
    assert record.getMessage().startswith("cycle took 7.5 s, longer than the 5 s interval")
    assert "raise workers (now 32) or scrapeIntervalSeconds" in record.getMessage()
    assert record.reason == "cycle_overrun"  # type: ignore[attr-defined]
    caplog.clear()
    fake.config.workers, fake.fanout.size = 0, 136  # auto: the size this cycle ran with
    runner()
    assert "raise workers (now 136, sized by the fleet) or scrapeIntervalSeconds" in caplog.records[0].getMessage()
    caplog.clear()
    fake.run_cycle = lambda: None
    runner()
    assert not caplog.records
