"""``python -m watchdog status``: reads a real watchdog's /status over loopback HTTP and prints the engine table and
the policy's view (or the JSON document); every failure is one line naming what and where, exit 2, and a refused
connection says how to port-forward."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import builders
import pytest
from served_kit import serving

from watchdog.cli import status as status_verb
from watchdog.cli.main import main
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config
from watchdog.demo.simpod import SimPod

PORT_FORWARD = "kubectl -n vllm-stall-watchdog port-forward deploy/vllm-stall-watchdog 8080"


@pytest.fixture
def served(emulator: EmulatorServer, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A watchdog (paused) on the emulator with one wedged and one mute pod, serving on 127.0.0.1; yields
    (watchdog, host:port). Its fake clock moves 15 s per cycle."""
    from watchdog.config.loader import load_config

    emulator.create_namespace("llm", {NAMESPACE_LABEL: "true"})
    config = load_config(str(write_config(tmp_path / "c.yaml", **{
        **FAST_SETTINGS, "paused": True, "minPodAgeSeconds": 0, "scrapeDeadlineSeconds": 0.3,
        "connectTimeoutSeconds": 0.2})), env={})
    now = [0.0]
    from watchdog.adapters.kube import KubeClient, KubeSettings

    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host=emulator.base_url)), clock=lambda: now[0])
    with SimPod("127.0.0.2", 0, "wedged") as wedged, SimPod("127.0.0.5", 0, "hang") as mute:
        seed_deployment(emulator, "llm", "wedged", wedged.address, wedged.port)
        seed_deployment(emulator, "llm", "mute", mute.address, mute.port)
        with serving(wd, 15.0) as server:
            wd.cycles = lambda n: [(now.__setitem__(0, now[0] + 15), wd.run_cycle()) for _ in range(n)]
            yield wd, f"127.0.0.1:{server.server_address[1]}"


def test_the_table_has_one_row_per_engine_then_the_policys_view(served: tuple[Any, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    wd, address = served
    wd.cycles(4)
    assert main(["status", "--url", address]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert "vllm-watchdog status:" not in err  # (other tests' stray log handlers may write to stderr)
    assert lines[0].split() == ["NAMESPACE", "POD", "MODE", "TARGET", "WINDOW", "STATE", "FOR", "LAST-SCRAPE",
                                "RUN/WAIT", "ACTED", "ENGINE"]
    wedged, mute = lines[1].split(), lines[2].split()
    assert wedged[0] == "llm" and wedged[1].startswith("wedged-") and wedged[2] == "enforce"
    assert wedged[3] == "vllm"  # the served document names each pod's target
    assert wedged[4] == "5s(global)" and wedged[5:7] == ["stalled", "45s"]
    assert wedged[7:10] == ["ok", "0s", "ago"] and wedged[11] == "paused" and wedged[12].startswith('engine="0"')
    assert mute[1].startswith("mute-") and mute[5:7] == ["unknown", "-"]
    assert "timeout, failing 45s" in lines[2]
    assert "pods watched: 2   engines: stalled=1 unknown=1" in lines
    assert "leader: yes   pause: ON (paused: true)   warm-up: done" in lines
    assert "budget (10m00s window): cluster 2 of 2 left; per namespace 1" in lines
    assert "breaker: closed" in lines and "deferred stalls by rule: paused=1" in lines
    assert f"held llm/{wedged[1]} {{{wedged[12]}}}: paused, may proceed when paused is set back to false" in lines
    assert lines[-1].startswith("cycle: last started 0s ago, last completed 0s ago")


def test_json_prints_the_document(served: tuple[Any, str], capsys: pytest.CaptureFixture[str]) -> None:
    wd, address = served
    wd.cycles(1)
    assert main(["status", "--url", f"http://{address}/status", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pods_watched"] == 2 and sorted(p["pod"].split("-")[0] for p in doc["pods"]) == ["mute", "wedged"]
    assert doc["policy"]["paused_why"] == "paused: true"


def test_before_the_first_cycle_it_says_so_and_exits_1(served: tuple[Any, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, address = served
    assert main(["status", "--url", address]) == 1
    assert capsys.readouterr().out == "no cycle has completed yet\n"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith("vllm-watchdog status: ")
    return line


def test_connection_refused_says_how_to_port_forward(capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    assert main(["status", "--url", f"http://127.0.0.1:{port}"]) == 2
    line = one_line_error(capsys)
    assert f"cannot connect to http://127.0.0.1:{port}/status (connection refused)" in line
    assert line.endswith(PORT_FORWARD)


@pytest.mark.parametrize(("status", "body", "needle"), [
    (404, b"nope", "answered HTTP 404, not the watchdog's status"),
    (200, b"<html>", "did not answer JSON"),
    (200, b'{"ok": true}', "answered JSON that is not the watchdog's status document"),
    (200, b"[1]", "answered JSON that is not the watchdog's status document"),
])
def test_an_answer_that_is_not_the_watchdogs_is_one_line(status: int, body: bytes, needle: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as other:
        threading.Thread(target=other.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        try:
            assert main(["status", "--url", f"127.0.0.1:{other.server_address[1]}"]) == 2
        finally:
            other.shutdown()
    assert needle in one_line_error(capsys)


def test_a_server_that_never_answers_is_a_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as silent:  # listens (the kernel completes the connect) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        assert main(["status", "--url", f"127.0.0.1:{port}", "--timeout", "0.2"]) == 2
    assert f"no answer from http://127.0.0.1:{port}/status within 0.2 s (--timeout)" in one_line_error(capsys)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "http://"])
def test_a_bad_url_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--url", url]) == 2
    assert "is not an http(s) URL" in one_line_error(capsys)


def test_help_teaches_how_to_reach_the_watchdog(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["status", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for needle in (PORT_FORWARD, "exec deploy/vllm-stall-watchdog -- python -m watchdog status", "Exit status",
                   "--format", "STATE", "LAST-SCRAPE", "2,000 pods"):
        assert needle in text, needle
    assert status_verb.DEFAULT_URL == "http://127.0.0.1:8080"


@pytest.mark.parametrize(("given", "url"), [
    ("127.0.0.1:8080", "http://127.0.0.1:8080/status"),
    ("http://127.0.0.1:18082/status/", "http://127.0.0.1:18082/status"),
    ("http://127.0.0.1:18082/readyz", "http://127.0.0.1:18082/status"),  # not /readyz/readyz for --ready
    ("http://h:1/prefix/", "http://h:1/prefix/status"),
    ("h:8080?x=1", "http://h:8080/status?x=1"),
    ("https://h", "https://h/status"),
    ("", None), ("http://127.0.0.1:99999", None), ("ftp://h", None), ("http://", None),
])  # fmt: skip
def test_the_status_url_from_what_was_typed(given: str, url: str | None) -> None:
    from watchdog.cli.status import status_url

    assert status_url(given) == url


def test_a_proxy_in_the_environment_is_not_used(served: tuple[Any, str], monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "")
    _, base = served
    assert main(["status", "--url", base, "--format", "json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["cycle"] is not None


def test_the_text_says_when_a_held_stall_and_a_used_budget_free() -> None:
    """Issue 30 item 3: a stall held by the namespace budget shows the rule and when it may proceed; the budget
    line says when each used-up budget has room again (a document without these, from an older watchdog, still
    renders)."""
    engine = {"engine": 'engine="0"', "state": "stalled", "for_s": 150.0, "running": 21, "waiting": 0,
              "acted": None, "deferred_by": ["namespace_budget"],
              "held": {"rule": "namespace_budget", "frees_in_s": 450.0,
                       "frees_when": "when the oldest counted deletion in my-llm leaves the rolling 600 s window"}}
    pod = {"namespace": "my-llm", "pod": "qwen-7b-1", "state": "stalled", "engines": [engine],
           "scrape": {"outcome": "ok", "age_s": 0.0, "failing_for_s": None}}
    budget = {"known": True, "window_s": 600.0, "cluster": {"max": 2, "used": 1, "left": 1}, "namespace_max": 1,
              "namespaces": {"my-llm": {"used": 1, "left": 0}},
              "frees_in_s": {"cluster": None, "namespaces": {"my-llm": 450.0}}}
    doc: dict[str, Any] = {
        "cycle": {"started_s_ago": 0.0, "completed_s_ago": 0.0, "last_error": None}, "snapshot_age_s": 0.0,
        "pods": [pod], "truncated": {"pods": 0}, "engines": {"stalled": 1}, "pods_watched": 1, "leader": True,
        "policy": {"paused": False, "paused_why": None, "warm_up": {"done": True, "left_s": 0.0}, "budget": budget,
                   "breaker": {"open": False, "why": None, "closes_in_s": None, "namespaces": {}},
                   "deferrals": {"namespace_budget": 1}, "owners_waiting": []}}
    lines = status_verb.render(doc)
    assert "budget (10m00s window): cluster 1 of 2 left; per namespace 1 (my-llm 0 left, frees in 7m30s)" in lines
    assert ('held my-llm/qwen-7b-1 {engine="0"}: namespace_budget, may proceed in 7m30s, when the oldest counted '
            "deletion in my-llm leaves the rolling 600 s window") in lines
    del budget["frees_in_s"], engine["held"]
    lines = status_verb.render(doc)
    assert "budget (10m00s window): cluster 1 of 2 left; per namespace 1 (my-llm 0 left)" in lines
    assert not [line for line in lines if line.startswith("held ")]


def test_one_pod_is_explained(served: tuple[Any, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`status --pod NAMESPACE/NAME`: the target and profile judging it, its mode, window and where it came from,
    each engine series with state and for how long, what acted, the rails that hold it back now, its Events."""
    wd, address = served
    wd.cycles(4)
    assert main(["status", "--url", address, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    wedged = next(p for p in doc["pods"] if p["pod"].startswith("wedged-"))
    assert main(["status", "--url", address, "--pod", f"llm/{wedged['pod']}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"pod llm/{wedged['pod']} (uid {wedged['uid']})"
    assert lines[1].startswith("judged by: ") and lines[1].endswith(", profile vllm")
    assert lines[2] == "mode: enforce (a stall is removed when no rail holds it)"
    assert lines[3] == ("policy: window 5 s (global: windowSeconds), min samples 3, action delete, "
                        "completion-only window off")
    assert lines[4] == "last scrape: ok, 0s ago"
    assert lines[5] == "engine series:"
    assert lines[6].startswith('  engine="0"') and ": stalled for 45s, running/waiting 21/0, acted: paused; held by " \
        "paused, may proceed when paused is set back to false" in lines[6]
    assert lines[7] == "rails that would hold a stall of it back now: paused (paused: true)"
    assert lines[8] == (f"its Events (the watchdog writes them, never reads them back): kubectl -n llm get events "
                        f"--field-selector involvedObject.uid={wedged['uid']} --sort-by=.lastTimestamp")


def test_one_pod_as_json_and_a_pod_not_watched(served: tuple[Any, str], capsys: pytest.CaptureFixture[str]) -> None:
    wd, address = served
    wd.cycles(1)
    assert main(["status", "--url", address, "--format", "json"]) == 0
    name = next(p["pod"] for p in json.loads(capsys.readouterr().out)["pods"] if p["pod"].startswith("mute-"))
    assert main(["status", "--url", address, "--pod", f"llm/{name}", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["pod"] == name
    assert main(["status", "--url", address, "--pod", "llm/nobody"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("vllm-watchdog status: llm/nobody is not among the 2 pods listed: not watched. Its "
                          "namespace needs the label vllm-watchdog.io/enabled=true")


@pytest.mark.parametrize("ref", ["llm", "/x", "llm/", "a/b/c"])
def test_a_pod_reference_that_is_not_namespace_slash_name_is_a_usage_error(
        ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--pod", ref])
    assert exited.value.code == 2
    assert f"argument --pod: {ref!r} is not NAMESPACE/NAME (e.g. llm/vllm-0)" in capsys.readouterr().err


def test_the_text_says_global_dry_run_and_the_rails_now() -> None:
    """Under the global dryRun every row says dry-run (the namespace label says enforce) and the rails list it."""
    pod = {"namespace": "llm", "pod": "p", "uid": "u1", "mode": "enforce", "state": "stalled", "profile": "sglang",
           "target": "big", "targets": ["big", "small"],
           "policy": {"window_s": 600, "window_source": "annotation", "min_samples": 3, "action": "evict",
                      "completion_only_window_s": 0},
           "scrape": {"outcome": "ok", "detail": None, "age_s": 3, "failing_for_s": None},
           "engines": [{"engine": "e", "state": "stalled", "for_s": 700, "running": 2, "waiting": 0,
                        "acted": "dry_run", "deferred_by": [], "held": None}]}
    doc = {"leader": False, "pods": [pod], "truncated": {"pods": 0},
           "policy": {"dry_run": True, "paused": False, "paused_why": None, "warm_up": {"done": False, "left_s": 30},
                      "breaker": {"open": True, "closes_in_s": 60, "namespaces": {"llm": {"closes_in_s": 90}}},
                      "budget": {"known": True, "cluster": {"left": 0}, "namespaces": {"llm": {"left": 0}}}}}
    (row,) = status_verb._rows([pod], global_dry_run=True)
    assert row[2:5] == ["dry-run", "big", "10m00s(annotation)"]
    lines = status_verb.explain_lines(doc, pod)
    assert lines[1] == ("judged by: target big, profile sglang (the podSelectors of targets big, small match it: the "
                        "one with the longest window judges, the first listed on a tie)")
    assert lines[2] == "mode: dry-run (global dryRun: observe only)"
    assert "window 600 s (annotation: the pod's annotation vllm-watchdog.io/window-seconds)" in lines[3]
    assert lines[6] == "  e: stalled for 11m40s, running/waiting 2/0, acted: dry-run"
    assert lines[7] == ("rails that would hold a stall of it back now: not the leader (this replica acts on nothing: "
                        "ask the leader); global dryRun (announced, never removed); warm-up (30s left); breaker open, "
                        "closes in 1m00s; namespace breaker open, closes in 1m30s; cluster deletion budget used up; "
                        "namespace llm deletion budget used up")
