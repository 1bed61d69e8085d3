"""The ``check`` verb: URL, file and stdin targets, text/json output, exit codes 0/1/2, no tracebacks."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from watchdog.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
V1 = FIXTURES / "vllm-v1-created-lookalikes.prom"


class _Handler(BaseHTTPRequestHandler):
    bodies: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        if self.path == "/hang":
            threading.Event().wait(2.0)
            return
        body = self.bodies.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    _Handler.bodies = {"/metrics": V1.read_bytes(), "/other": (FIXTURES / "llamacpp.prom").read_bytes()}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_url_text_table(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, f"{server}/metrics")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"source: {server}/metrics") and "series: 2" in lines[0]
    assert lines[1] == 'series {engine="0",model_name="m"}'
    assert lines[2].split() == ["running", "21"] and lines[3].split() == ["waiting", "2"]
    assert lines[5].split()[:3] == ["progress", "vllm:generation_tokens_total", "9332410"]
    assert lines[5].endswith("counter: steps that produce request outputs")
    assert lines[6].split()[:2] == ["vllm:iteration_tokens_total_count", "505602"]
    assert [line.split()[:2] for line in lines[10:12]] == [["vllm:prompt_tokens_total", "86354921"],
                                                             ["vllm:request_success_total", "-"]]
    assert "counter (completion-only): when a request finishes" in lines[11]
    assert lines[12] == 'series {engine="1",model_name="m"}'
    assert lines[13].split() == ["running", "0"]


def test_file_json_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--format", "json", str(FIXTURES / "vllm-format-quirks.prom"))
    assert code == 0
    doc = json.loads(out)
    assert doc["source"] == str(FIXTURES / "vllm-format-quirks.prom") and doc["skipped_lines"] == 0
    first = doc["series"][0]
    assert first["labels"] == {"engine": "0", "model_name": 'a "quoted" {model}, with = and /paths/'}
    assert (first["running"], first["waiting"], first["progress"]["vllm:prompt_tokens_total"]) == (1e100, 0.0015, None)
    assert first["progress"]["vllm:generation_tokens_total"] == 12345678901234.0 and doc["metrics_path"] == "/metrics"
    assert doc["series"][2]["running"] == "NaN" and doc["series"][3]["waiting"] == "-Inf"


def test_profile_option(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--profile", "llamacpp", "--format", "json", f"{server}/other")
    assert code == 0
    assert json.loads(out)["series"] == [
        {"labels": {}, "running": 2.0, "waiting": 0.0, "paused": None,
         "progress": {"llamacpp:n_decode_total": 21500.0, "llamacpp:tokens_predicted_total": 20931.0,
                      "llamacpp:prompt_tokens_total": 4812.0}}
    ]  # fmt: skip


@pytest.mark.e2e  # a `watchdog` process of its own
def test_stdin_in_a_subprocess() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "watchdog", "check", "--format", "json", "-"],
        input=V1.read_bytes(), capture_output=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["source"] == "-" and [s["running"] for s in doc["series"]] == [21.0, 0.0]


def test_no_metrics_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.prom"
    empty.write_text("# HELP process_open_fds x\nprocess_open_fds 3\n")
    code, out, err = run(capsys, str(empty))
    assert (code, out) == (1, "")
    assert "none of the vllm profile's metrics" in err and "--disable-log-stats" in err and "--profile" in err
    code, _, err = run(capsys, "--profile", "sglang", str(V1))
    assert code == 1 and "sglang" in err


def test_refused_url_exit_2_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}/metrics"
    probe.close()
    code, out, err = run(capsys, url)
    assert (code, out) == (2, "")
    assert err == f"vllm-watchdog check: cannot scrape {url}: connection refused\n"


def test_deadline_option_exit_2(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--deadline", "0.5", f"{server}/hang")
    assert code == 2 and err == f"vllm-watchdog check: cannot scrape {server}/hang: timeout after 0.5 s\n"


def test_http_error_and_max_bytes(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, f"{server}/missing")
    assert code == 2 and "HTTP 404" in err
    code, _, err = run(capsys, "--max-bytes", "100", f"{server}/metrics")
    assert code == 2 and "too large" in err
    code, _, err = run(capsys, "--max-bytes", "100", str(V1))
    assert code == 2 and err.startswith(f"vllm-watchdog check: cannot read {V1}: larger than --max-bytes 100")


def test_unreadable_file_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, str(tmp_path / "nope.prom"))
    assert (
        code == 2 and err == f"vllm-watchdog check: cannot read {tmp_path / 'nope.prom'}: No such file or directory\n"
    )
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_bad_usage_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--deadline", "0", "x"], ["--max-bytes", "-1", "x"], ["--profile", "tgi", "x"], []):
        with pytest.raises(SystemExit) as info:
            main(["check", *argv])
        assert info.value.code == 2
    capsys.readouterr()


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for needle in ("http://", "stdin", "running", "progress", "paused", "skipped_lines", "Exit status",
                   "--disable-log-stats", "KV-cache"):
        assert needle in text


def test_credentials_in_a_url_are_refused_and_never_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "http://admin:s3cret@127.0.0.1:1/metrics")
    assert rc == 2 and "s3cret" not in err and "admin" not in err
    assert "http://***@127.0.0.1:1/metrics" in err and "credentials in URLs are never sent" in err


def test_a_url_without_host_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "http://")
    assert rc == 2 and "no host" in err


def test_a_series_without_a_live_progress_signal_is_called_out(capsys: pytest.CaptureFixture[str]) -> None:
    trtllm = Path(__file__).parents[1] / "fixtures" / "incidents" / "trtllm-long-request" / "0.prom"
    code, out, err = run(capsys, "--profile", "trtllm", str(trtllm))
    assert code == 0 and 'series {engine_type="pytorch",model_name="Qwen3-8B"}' in out
    assert "counter (completion-only): when a request finishes" in out
    assert 'warning: no live progress signal of the trtllm profile in series engine_type="pytorch"' in err
    assert "completionOnlyWindowSeconds" in err
    code, _, err = run(capsys, str(FIXTURES / "vllm-v1-created-lookalikes.prom"))
    assert code == 0 and "warning" not in err


def test_a_series_without_a_valid_running_gauge_is_called_out(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    body = tmp_path / "m.prom"
    body.write_text('vllm:num_requests_running{engine="0"} NaN\nvllm:generation_tokens_total{engine="0"} 5\n'
                    'vllm:num_requests_running{engine="1"} 2\nvllm:generation_tokens_total{engine="1"} 5\n')
    code, _, err = run(capsys, str(body))
    assert code == 0
    assert 'warning: no valid running gauge (vllm:num_requests_running) in series engine="0": missing' in err
    assert 'engine="1"' not in err


def test_check_scrapes_through_the_cycles_transport(server: str, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """One scrape transport for `run` and `check`: check's URL goes through AsyncScraper, called synchronously."""
    from watchdog.adapters import ascrape

    fetched: list[str] = []
    real = ascrape.AsyncScraper.fetch

    def recording(self: ascrape.AsyncScraper, url: str) -> bytes:
        fetched.append(url)
        return real(self, url)

    monkeypatch.setattr(ascrape.AsyncScraper, "fetch", recording)
    assert main(["check", f"{server}/metrics"]) == 0
    assert fetched == [f"{server}/metrics"]
