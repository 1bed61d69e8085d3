"""The bounded Prometheus client over real HTTP on loopback (tests/promfake.py): decoding, and every failure
as one PrometheusError line."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.promfake import FakePrometheus
from watchdog.adapters.prometheus import PrometheusClient, PrometheusError, PrometheusLimits, decode


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as fake:
        yield fake


def client(prom: FakePrometheus, **kw: object) -> PrometheusClient:
    return PrometheusClient(PrometheusLimits(prom.url, **{"timeout_s": 2.0, **kw}))  # type: ignore[arg-type]


def test_a_matrix_answer_gives_raw_samples_with_prometheus_timestamps(prom: FakePrometheus) -> None:
    labels = {"namespace": "n", "pod": "p", "engine": "0"}
    prom.add("vllm:num_requests_running", labels, 100.5, 3)
    prom.add("vllm:num_requests_running", labels, 115.5, 4)
    prom.add("vllm:num_requests_running", labels, 40.0, 9)  # outside [60s]
    prom.add("vllm:num_requests_running", {**labels, "pod": "q"}, 110.0, float("nan"))
    series = client(prom).query('vllm:num_requests_running{namespace="n"}[60s]', 120.0)
    by_pod = {s[0]["pod"]: s[1] for s in series}
    assert by_pod["p"] == [(100.5, 3.0), (115.5, 4.0)]
    assert math_nan(by_pod["q"][0][1]) and by_pod["q"][0][0] == 110.0
    assert prom.queries == [('vllm:num_requests_running{namespace="n"}[60s]', 120.0)]
    sent = prom.headers[0]
    assert sent["Accept-Encoding"] == "identity" and "Authorization" not in sent


def math_nan(value: float) -> bool:
    return value != value


def test_query_many_keeps_the_order(prom: FakePrometheus) -> None:
    prom.add("a", {}, 10.0, 1)
    prom.add("b", {}, 10.0, 2)
    answers = client(prom).query_many(["b[60s]", "a[60s]", "c[60s]"], 20.0)
    assert [[v for _, s in a for _, v in s] for a in answers] == [[2.0], [1.0], []]


def test_a_vector_answer_decodes_too() -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "p"}, "value": [12.5, "+Inf"]}]}}).encode()
    assert decode(body) == [({"pod": "p"}, [(12.5, float("inf"))])]


def test_the_bearer_token_is_read_from_its_file_at_every_query(prom: FakePrometheus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    c = client(prom, bearer_token_file=str(token))
    c.query("x[60s]", 1.0)
    token.write_text("second")
    c.query("x[60s]", 1.0)
    assert [h["Authorization"] for h in prom.headers] == ["Bearer first", "Bearer second"]
    token.unlink()
    with pytest.raises(PrometheusError, match="cannot read the bearer token file"):
        c.query("x[60s]", 1.0)


@pytest.mark.parametrize(("status", "body", "message"), [
    (503, b"down for maintenance", "HTTP 503"),
    (422, json.dumps({"status": "error", "errorType": "execution", "error": "too many samples"}).encode(),
     "HTTP 422: execution: too many samples"),
    (200, json.dumps({"status": "error", "errorType": "timeout", "error": "query timed out"}).encode(),
     "status 'error'"),
    (200, json.dumps({"status": "success", "warnings": ["store down"],
                      "data": {"resultType": "matrix", "result": []}}).encode(), "warnings"),
    (200, b"<html>not json</html>", "not JSON"),
    (200, json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}).encode(),
     "not a matrix or vector"),
    (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"pod": "p"}, "values": [[1, 2]]}]}}).encode(), "not [time"),
    (302, b"", "redirect not followed"),
])
def test_every_bad_answer_is_one_line(prom: FakePrometheus, status: int, body: bytes, message: str) -> None:
    prom.fail = (status, body)
    with pytest.raises(PrometheusError) as info:
        client(prom).query("x[60s]", 1.0)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_body_over_the_bound_is_refused(prom: FakePrometheus) -> None:
    for i in range(200):
        prom.add("x", {"pod": f"pod-{i}", "namespace": "a-long-namespace-name"}, 10.0, i)
    with pytest.raises(PrometheusError, match="larger than prometheusMaxBytes"):
        client(prom, max_bytes=4096).query("x[60s]", 20.0)
    assert len(client(prom, max_bytes=1 << 20).query("x[60s]", 20.0)) == 200


def test_a_slow_or_absent_prometheus_fails_within_the_timeout(prom: FakePrometheus) -> None:
    prom.delay_s = 2.0
    start = time.monotonic()
    with pytest.raises(PrometheusError, match=r"no answer within 0\.3 s"):
        client(prom, timeout_s=0.3).query("x[60s]", 1.0)
    assert time.monotonic() - start < 1.5
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError, match="unreachable"):
        PrometheusClient(PrometheusLimits(f"http://127.0.0.1:{port}", timeout_s=1.0)).query("x[60s]", 1.0)
