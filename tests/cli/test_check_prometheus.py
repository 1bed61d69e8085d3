"""``check --prometheus URL --pod NS/NAME``: one pod's engine series read from Prometheus (a loopback fake of
its query API, tests/promfake.py), in the same JSON shape as ``check`` on a URL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.promfake import FakePrometheus
from watchdog.cli.main import main

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as fake:
        yield fake


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_is_the_same_as_check_on_the_pods_own_body(prom: FakePrometheus,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    body = FIXTURES / "vllm-v1-created-lookalikes.prom"
    now = time.time()
    prom.feed(body.read_text(), {"namespace": "llm", "pod": "llama-0", "instance": "10.1.2.3:8000"}, now - 5)
    prom.feed(body.read_text(), {"namespace": "llm", "pod": "llama-1"}, now - 5)
    prom.add("up", {"namespace": "llm", "pod": "llama-0"}, now - 5, 1)
    code, out, err = run(capsys, "--prometheus", prom.url, "--pod", "llm/llama-0", "--format", "json")
    assert (code, err) == (0, "")
    direct_code, direct, _ = run(capsys, "--format", "json", str(body))
    got, want = json.loads(out), json.loads(direct)
    assert direct_code == 0 and got["source"] == prom.url
    assert {k: v for k, v in got.items() if k != "source"} == {k: v for k, v in want.items() if k != "source"}
    assert got["series"][0]["running"] == 21
    assert all('pod="llama-0"' in q for q, _ in prom.queries) and len(prom.queries) == 15


def test_text_up_zero_and_missing_pod(prom: FakePrometheus, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    prom.feed((FIXTURES / "vllm-v1-created-lookalikes.prom").read_text(), {"namespace": "llm", "pod": "p"}, now - 5)
    prom.add("up", {"namespace": "llm", "pod": "p"}, now - 3, 0)
    code, out, err = run(capsys, "--prometheus", prom.url, "--pod", "llm/p")
    assert code == 1
    assert err == ("vllm-watchdog check: pod llm/p: Prometheus' newest up sample of its target is 0 (its scrapes "
                   "fail): the watchdog reads it as unknown\n")  # the same line as for a pod with no series (llm/q)
    assert out.startswith("pod llm/p, newest sample ") and 'series {engine="0",model_name="m"}' in out
    code, out, err = run(capsys, "--prometheus", prom.url, "--pod", "llm/absent")
    assert (code, out) == (1, "") and "no series of the vllm profile for pod llm/absent" in err
    prom.add("up", {"namespace": "llm", "pod": "q"}, now - 3, 0)  # failing from the start: no series, up 0
    code, out, err = run(capsys, "--prometheus", prom.url, "--pod", "llm/q")
    assert (code, out) == (1, "") and err.endswith(
        "pod llm/q: Prometheus' newest up sample of its target is 0 (its scrapes fail): the watchdog reads it as "
        "unknown\n")


NEEDS_POD = "--prometheus URL needs --pod NAMESPACE/NAME and no TARGET"


@pytest.mark.parametrize(("argv", "said"), [
    (["--prometheus", "URL", "--pod", "nopod"], NEEDS_POD),
    (["--prometheus", "URL", "--pod", "a/b", "extra-target"], NEEDS_POD),
    (["--prometheus", "URL", "--pod", "a/b", "--staleness", "0.5"],
     "--staleness must be in [1, 300] seconds (Prometheus' lookback delta)"),
    (["--prometheus", "URL", "--pod", "a/b", "--tenant", "a\nb"],
     "Prometheus tenant 'a\\nb' must be 1-256 printable characters"),
    (["--prometheus", "URL", "--pod", "a/b", "--pod-label", "namespace"],
     "--namespace-label/--pod-label: the namespace and pod labels must differ"),
    (["--prometheus", "URL", "--pod", "a/b", "--pod-label", "pod-name"],
     "--namespace-label/--pod-label: 'pod-name' must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not "
     "starting with __)"),
    (["--prometheus", "URL", "--pod", "a/b", "--username-file", "/u"],
     "Prometheus credentials: basic auth needs both a username file and a password file"),
    (["--prometheus", "URL", "--pod", "a/b", "--username-file", "/u", "--password-file", "/p",
      "--bearer-token-file", "/t"],
     "Prometheus credentials: a bearer token file and basic auth exclude each other (one Authorization header)"),
])
def test_usage_is_one_line(prom: FakePrometheus, capsys: pytest.CaptureFixture[str], argv: list[str],
                           said: str) -> None:
    code, _, err = run(capsys, *[prom.url if a == "URL" else a for a in argv])
    assert code == 2 and err.strip() == f"vllm-watchdog check: {said}" and prom.queries == []


def test_no_target_and_no_prometheus_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", "--pod", "llm/p"])
    assert info.value.code == 2
    assert capsys.readouterr().err == ("vllm-watchdog check: TARGET (or --prometheus URL --pod NAMESPACE/NAME) "
                                       "is required\n")


def test_prometheus_errors_are_one_line(prom: FakePrometheus, capsys: pytest.CaptureFixture[str]) -> None:
    prom.fail = (503, b"unavailable")
    code, out, err = run(capsys, "--prometheus", prom.url, "--pod", "llm/p")
    assert (code, out) == (2, "")
    assert err.strip() == "vllm-watchdog check: Prometheus answered HTTP 503"
    code, _, err = run(capsys, "--prometheus", "ftp://x", "--pod", "llm/p")
    assert code == 2 and "must be http(s)://" in err
