"""Decoding a Prometheus answer (watchdog/adapters/promdecode.py): the one typed pass and the careful path give the
same rows, only the labels asked for are read, and every malformed answer is one line (the client's tests in
test_prometheus.py send them through a real HTTP server)."""

from __future__ import annotations

import json

import pytest

from watchdog.adapters import promdecode
from watchdog.adapters.promdecode import PrometheusError, decode, decode_values


def answer(rows: list[dict[str, object]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}).encode()


def test_decoding_a_vector_row() -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "p"}, "value": [12.5, "+Inf"]}]}}).encode()
    assert decode(body) == [({"pod": "p"}, 12.5, float("inf"))]  # "+Inf": the careful path
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "p"}, "value": [12.5, "-Inf"]}, {"metric": {"pod": "q"}, "value": [12.5, 3]}]}}).encode()
    assert decode(body) == [({"pod": "p"}, 12.5, float("-inf")), ({"pod": "q"}, 12.5, 3.0)]  # one pass; a bare 3


def test_decoding_only_the_values_of_the_labels_asked_for() -> None:
    rows = [{"metric": {"pod": "p", "namespace": "n", "job": {"not": "a string"}}, "value": [1, "2"]},
            {"metric": {"namespace": "m"}, "value": [1, "NaN"]}]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}).encode()
    (p, m) = decode_values(body, ("namespace", "pod", "pod"))  # a label the answer does not read is never checked
    assert p == (("n", "p", "p"), 2.0) and m[0] == ("m", None, None) and m[1] != m[1]
    with pytest.raises(PrometheusError, match=r"not \{metric.*\$\[0\]\.metric\.job"):
        decode_values(body, ("job",))  # a label it reads must hold a string


def test_the_one_pass_and_the_careful_path_give_the_same_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"metric": {"namespace": "n", "pod": f"p{i}", "engine": str(i % 3), "job": "j"},
             "value": [100.0 + i, ["0", "12.5", "NaN", "-Inf", "1e3"][i % 5]]} for i in range(50)]
    body, labels = answer(rows), ("namespace", "pod", "engine", "model_name")
    fast = decode_values(body, labels)
    taken: list[bool] = []
    careful = promdecode._careful
    monkeypatch.setattr(promdecode, "_careful", lambda *a: taken.append(True) or careful(*a))
    with_inf = decode_values(answer([*rows, {"metric": {"pod": "x"}, "value": [1.0, "+Inf"]}]), labels)
    assert taken == [True] and len(fast) == 50  # "+Inf" only takes the careful path
    assert str(with_inf[:-1]) == str(fast)  # the same rows and values (NaN compared as text)
    assert with_inf[-1] == ((None, "x", None, None), float("inf"))
    assert fast[1] == (("n", "p1", "1", None), 12.5) and fast[2][1] != fast[2][1]


@pytest.mark.parametrize(("body", "message"), [
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"pod": "p\xff"}, '
     b'"value": [1, "2"]}]}}', "not valid UTF-8"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"pod": "p\xff"}, '
     b'"value": [1, "+Inf"]}]}}', "not valid UTF-8"),  # the careful path too
    (b'{"data": {"resultType": "vector", "result": []}}', "has no status"),
    (b'{"status": "success", "data": {"result": []}}', "has no data.resultType"),
])
def test_odd_answers_are_one_clear_line(body: bytes, message: str) -> None:
    with pytest.raises(PrometheusError, match=message):
        decode_values(body, ("namespace", "pod"))
    with pytest.raises(PrometheusError, match=message):
        decode(body)
    assert promdecode.error_text(body) == ""


def test_labels_not_read_are_not_checked_either() -> None:
    body = answer([{"metric": {"pod": "p", "job": 3}, "value": [1, "2"]}])  # a number: only a read label must be text
    assert decode_values(body, ("pod",)) == [(("p",), 2.0)]
    raw = b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"pod": "p", "x": "\xff"}, '
    assert decode_values(raw + b'"value": [1, "2"]}]}}', ("pod",)) == [(("p",), 2.0)]
