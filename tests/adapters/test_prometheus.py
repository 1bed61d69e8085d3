"""The bounded Prometheus client over real HTTP on loopback (tests/promfake.py): decoding, and every failure
as one PrometheusError line."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import builders
import pytest

from tests.promfake import FakePrometheus
from watchdog.adapters.prometheus import PrometheusClient, PrometheusError


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as fake:
        yield fake


def client(prom: FakePrometheus, **kw: object) -> PrometheusClient:
    return PrometheusClient(builders.prometheus_limits(prom.url, **{"timeout_s": 2.0, **kw}))  # type: ignore[arg-type]


def test_a_vector_answer_gives_its_rows(prom: FakePrometheus) -> None:
    labels = {"namespace": "n", "pod": "p", "engine": "0"}
    prom.add("vllm:num_requests_running", labels, 100.5, 3)
    prom.add("vllm:num_requests_running", labels, 115.5, 4)
    prom.add("vllm:num_requests_running", {**labels, "pod": "q"}, 110.0, float("nan"))
    prom.add("vllm:num_requests_running", {**labels, "pod": "r"}, 40.0, 9)  # outside [60s]
    query = 'sum by (pod) (last_over_time(vllm:num_requests_running{namespace="n"}[60s]))'
    rows = client(prom).query(query, 120.0)
    by_pod = {labels["pod"]: (t, value) for labels, t, value in rows}
    assert by_pod.keys() == {"p", "q"} and by_pod["p"] == (120.0, 4.0)
    assert by_pod["q"][1] != by_pod["q"][1]  # NaN
    stamps = client(prom).query("max by (pod) (timestamp(vllm:num_requests_running))", 120.0)
    assert sorted((labels["pod"], value) for labels, _, value in stamps) == [("p", 115.5), ("q", 110.0), ("r", 40.0)]
    assert prom.queries[0] == (query, 120.0)
    sent = prom.headers[0]
    assert sent["Accept-Encoding"] == "identity" and "Authorization" not in sent and "X-Scope-OrgID" not in sent


def test_query_each_gives_every_answer_with_its_index_and_a_failure_as_that_querys_own(prom: FakePrometheus,
                                                                                       ) -> None:
    prom.add("a", {}, 10.0, 1)
    prom.add("b", {}, 10.0, 2)
    prom.add("a", {"x": "1", "y": "2"}, 10.0, 3)
    queries = [(f"sum by (x, y) (last_over_time({n}[60s]))", ("y", "z", "x")) for n in "bac"]
    answers = dict(client(prom).query_each(queries, 20.0))
    assert {i: sorted(rows, key=str) for i, rows in answers.items()} == {  # the values of the labels asked for
        0: [((None, None, None), 2.0)], 1: [(("2", None, "1"), 3.0), ((None, None, None), 1.0)],
        2: []}
    both = dict(client(prom).query_each([("sum by (x) (last_over_time(a[60s]))", ()), ("not promql", ())], 20.0))
    assert len(both[0]) == 2 and isinstance(both[1], PrometheusError) and "bad_data" in str(both[1])


def test_the_bearer_token_is_read_from_its_file_at_every_query(prom: FakePrometheus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    c = client(prom, bearer_token_file=str(token))
    c.query(UP, 1.0)
    token.write_text("second")
    c.query(UP, 1.0)
    assert [h["Authorization"] for h in prom.headers] == ["Bearer first", "Bearer second"]
    token.unlink()
    with pytest.raises(PrometheusError, match="cannot read the bearer token file"):
        c.query(UP, 1.0)


def test_basic_auth_from_two_files_and_the_tenant_header(prom: FakePrometheus, tmp_path: Path) -> None:
    (tmp_path / "username").write_text("watchdog\n")
    (tmp_path / "password").write_text("s3cr:t")
    c = client(prom, username_file=str(tmp_path / "username"), password_file=str(tmp_path / "password"),
               tenant="team-a")
    c.query(UP, 1.0)
    (tmp_path / "password").write_text("rotated")
    c.query(UP, 1.0)
    assert [h["Authorization"] for h in prom.headers] == [
        "Basic " + base64.b64encode(b"watchdog:s3cr:t").decode(),
        "Basic " + base64.b64encode(b"watchdog:rotated").decode()]
    assert [h["X-Scope-OrgID"] for h in prom.headers] == ["team-a", "team-a"]
    (tmp_path / "password").write_text("two\nlines")
    with pytest.raises(PrometheusError, match=r"password file .* holds no single-line password"):
        c.query(UP, 1.0)


UP = 'min by (pod) (last_over_time(up{pod!=""}[60s]))'


@pytest.mark.parametrize(("status", "body", "message"), [
    (503, b"down for maintenance", "HTTP 503"),
    (422, json.dumps({"status": "error", "errorType": "execution", "error": "too many samples"}).encode(),
     "HTTP 422: execution: too many samples"),
    (200, json.dumps({"status": "error", "errorType": "timeout", "error": "query timed out"}).encode(),
     "status 'error'"),
    (200, json.dumps({"status": "success", "warnings": ["store down"],
                      "data": {"resultType": "vector", "result": []}}).encode(), "warnings"),
    (200, b"<html>not json</html>", "not JSON"),
    (200, b"[1, 2]", "not a JSON object"),
    (200, json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}).encode(),
     "not a vector"),
    (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
     "'matrix', not a vector"),
    (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "p"}, "value": [1, [2]]}]}}).encode(), "not {metric"),
    (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": 1}, "value": [1, "2"]}]}}).encode(), "not {metric: {label"),
    (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [1, "x"]}]}}).encode(), "not {metric"),
    (200, b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1e999, "1"]}]}}',
     "not {metric"),  # a time that is no finite number
    (302, b"", "redirect not followed"),
])
def test_every_bad_answer_is_one_line(prom: FakePrometheus, status: int, body: bytes, message: str) -> None:
    prom.fail = (status, body)
    with pytest.raises(PrometheusError) as info:
        client(prom).query(UP, 1.0)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_body_over_the_bound_is_refused(prom: FakePrometheus) -> None:
    for i in range(200):
        prom.add("up", {"pod": f"pod-{i}", "namespace": "a-long-namespace-name"}, 10.0, 1)
    with pytest.raises(PrometheusError, match="larger than prometheusMaxBytes"):
        client(prom, max_bytes=4096).query(UP, 20.0)
    assert len(client(prom, max_bytes=1 << 20).query(UP, 20.0)) == 200


def test_a_slow_or_absent_prometheus_fails_within_the_timeout(prom: FakePrometheus) -> None:
    prom.delay_s = 2.0
    start = time.monotonic()
    with pytest.raises(PrometheusError, match=r"no answer within 0\.3 s"):
        client(prom, timeout_s=0.3).query(UP, 1.0)
    assert time.monotonic() - start < 1.5
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError, match="unreachable"):
        PrometheusClient(builders.prometheus_limits(f"http://127.0.0.1:{port}", timeout_s=1.0)).query(UP, 1.0)


def test_one_deadline_bounds_the_whole_batch_of_queries(prom: FakePrometheus) -> None:
    prom.delay_s = 0.4  # each answer: 0.4 s; 8 queries, 4 in flight: 0.8 s in all
    queries = [(f"sum by (x) (last_over_time(m{i}[60s]))", ("x",)) for i in range(8)]
    start = time.monotonic()
    answers = dict(client(prom, timeout_s=0.6).query_each(queries, 1.0))
    assert time.monotonic() - start < 1.0
    late = [a for a in answers.values() if isinstance(a, PrometheusError)]  # the second four: cut at the deadline
    assert len(answers) == 8 and len(late) == 4 and all("no answer within 0.6 s" in str(a) for a in late)
    assert not any(isinstance(a, PrometheusError) for a in client(prom, timeout_s=1.5).query_each(queries, 1.0))


def test_a_deeply_nested_answer_and_a_refused_connection_are_one_line(prom: FakePrometheus) -> None:
    prom.fail = (200, b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(PrometheusError, match="not a JSON object"):
        client(prom).query(UP, 1.0)
    for nested in (b'{"status": "success", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                   b'{"status": "success", "data": {"resultType": "vector", "result": ' + b"[" * 100_000
                   + b"]" * 100_000 + b"}}"):
        prom.fail = (200, nested)
        with pytest.raises(PrometheusError, match=r"not JSON|nested too deep|not \{metric"):
            client(prom).query(UP, 1.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError) as info:
        PrometheusClient(builders.prometheus_limits(f"http://127.0.0.1:{port}", timeout_s=1.0)).query(UP, 1.0)
    assert str(info.value) == f"Prometheus http://127.0.0.1:{port} unreachable: connection refused"


def test_a_missing_or_bad_ca_file_is_named_as_such(tmp_path: Path) -> None:
    with socket.socket() as sock:  # nothing listens: the CA file is checked before connecting
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    for ca_file, why in ((str(tmp_path / "missing.pem"), "No such file or directory"), (str(bad), "")):
        limits = builders.prometheus_limits(f"https://127.0.0.1:{port}", timeout_s=1.0, ca_file=ca_file)
        with pytest.raises(PrometheusError) as info:
            PrometheusClient(limits).query(UP, 1.0)
        assert str(info.value).startswith(f"prometheusCaFile {ca_file!r} is not a readable CA bundle: ")
        assert why in str(info.value)


def test_queries_are_pulled_one_per_free_slot_after_the_answers_before_them(prom: FakePrometheus) -> None:
    # The caller decides what to send next from what came back (promsource's schedule): a query is pulled only for
    # a free slot, after every answer so far was yielded; None means "nothing until another answer".
    prom.delay_s = 0.1
    seen: list[str] = []

    def queries() -> Iterator[tuple[str, tuple[str, ...]] | None]:
        for i in range(6):
            seen.append(f"pull {i}")
            yield f"sum by (x) (last_over_time(m{i}[60s]))", ("x",)
        seen.append("pull none")
        yield None  # nothing more until the last answers: query_each waits for them, then pulls again
        seen.append("pull 6")
        yield "sum by (x) (last_over_time(m6[60s]))", ("x",)

    for index, rows in client(prom, timeout_s=5.0).query_each(queries(), 1.0):
        assert not isinstance(rows, PrometheusError)
        seen.append(f"answer {index}")
    assert seen[:4] == ["pull 0", "pull 1", "pull 2", "pull 3"]  # 4 in flight, then one pull per answer
    answers = [i for i, s in enumerate(seen) if s.startswith("answer")]  # in whatever order they came
    assert seen.index("pull 4") > answers[0] and seen.index("pull 6") > answers[1]
    assert sorted(s for s in seen if s.startswith("answer")) == [f"answer {i}" for i in range(7)]
