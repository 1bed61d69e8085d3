"""``run``: a fatal start-up error (bad configuration, unusable kubeconfig, an API server that does not answer
``--once``, a listen address in use) is ONE line on stderr in the configured log format — JSON: one object with
``"level": "error"`` and a ``reason`` — and a non-zero exit, never a traceback. In process, through
``watchdog.cli.main.main``; the API server is the emulator on loopback or a closed loopback port."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from watchdog.cli.main import main
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, write_config, write_kubeconfig

TEXT_LINE = re.compile(r"^\d\d:\d\d:\d\d (?P<level>[A-Z]+) +(?P<logger>[\w.]+): (?P<msg>.*)$")


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> None:
    """``run`` sets up logging for the process (put back by conftest's ``restore_logging``); keep WATCHDOG_*
    variables of the outside world out of the configuration."""
    for name in [k for k in os.environ if k.startswith("WATCHDOG_")]:
        monkeypatch.delenv(name)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """Exit status and stderr lines of ``run ARGS``; nothing may go to stdout, no traceback anywhere."""
    status = main(["run", *args])
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    return status, err.splitlines()


def errors(lines: list[str], fmt: str) -> list[dict[str, Any]]:
    """The error records among ``lines`` (every line must be a record of the format)."""
    records = []
    for line in lines:
        if fmt == "json":
            records.append(json.loads(line))
        else:
            match = TEXT_LINE.match(line)
            assert match, line
            records.append({"level": match["level"].lower(), "logger": match["logger"], "msg": match["msg"]})
    return [r for r in records if r["level"] == "error"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BAD = ("windowSecond: 300\n", ["--window-seconds", "abc", "--min-samples", "0"])
PROBLEMS = ["{config}:{line} key 'windowSecond': unknown setting (did you mean 'windowSeconds'?)",
            "--window-seconds: 'abc' is not a number", "--min-samples: '0' is below the minimum 1"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_bad_configuration_is_one_line_in_the_configured_format(fmt: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"logFormat: {fmt}\n{BAD[0]}")
    status, lines = run(capsys, "--config", str(config), *BAD[1])
    problems = [p.format(config=config, line=2) for p in PROBLEMS]
    assert status == 2 and len(lines) == 1
    (error,) = errors(lines, fmt)
    assert error["logger"] == "watchdog.cli.run"
    assert error["msg"] == "configuration refused, 3 problems: " + "; ".join(problems)
    if fmt == "json":
        assert (error["reason"], error["problems"]) == ("config", problems)


def test_a_refused_log_format_reports_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = run(capsys, "--log-format", "xml")
    assert status == 2
    (error,) = errors(lines, "json")
    assert error["msg"] == "configuration refused, 1 problem: --log-format: 'xml' is not one of json, text"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_an_unusable_kubeconfig_is_one_line_in_the_configured_format(fmt: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing"
    status, lines = run(capsys, "--once", "--log-format", fmt, "--kubeconfig", str(missing))
    assert status == 2
    (error,) = errors(lines, fmt)
    assert error["msg"] == ("cannot set up the Kubernetes client (kubeconfig or in-cluster account): load "
                            f"configuration: kubeconfig '{missing}': no such file")
    assert fmt == "text" or error["reason"] == "kubeconfig"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_an_api_server_that_does_not_answer_fails_once_in_one_line(fmt: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    config = write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "logFormat": fmt})
    status, lines = run(capsys, "--once", "--kubeconfig", str(kubeconfig), "--config", str(config),
                        "--api-timeout-seconds", "2")
    assert status == 1
    (error,) = errors(lines, fmt)
    assert error["msg"].startswith("cycle failed: list namespaces")
    assert fmt == "text" or error["reason"] == "api"


def test_a_listen_address_in_use_is_one_json_line(emulator: EmulatorServer, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.base_url)
    config = write_config(tmp_path / "config.yaml", **{**FAST_SETTINGS, "logFormat": "json"})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        status, lines = run(capsys, "--kubeconfig", str(kubeconfig), "--config", str(config),
                            "--listen-address", f"127.0.0.1:{port}")
    assert status == 2
    (error,) = errors(lines, "json")
    assert (error["msg"], error["reason"]) == (
        f"cannot listen on 127.0.0.1:{port} (listenAddress): Address already in use", "listen")
