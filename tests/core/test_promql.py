"""The Prometheus queries of a profile and the grouping of their answers into per-pod engine series: the same
aggregation as a scraped body (one rule, core/parsing.py)."""

from __future__ import annotations

import math

from watchdog.core.parsing import aggregate_samples, parse_exposition, signal_slots
from watchdog.core.profiles import get_profile
from watchdog.core.promql import PodReading, group_pods, quote, reading_outcome, slot_queries, up_query, url_problem

VLLM = get_profile("vllm")
SGLANG = get_profile("sglang")


def test_one_range_query_per_signal_slot_with_the_selectors_matchers() -> None:
    queries = slot_queries(VLLM, 60)
    assert len(queries) == len(signal_slots(VLLM)) == 13
    assert queries[:3] == ["vllm:num_requests_running[60s]", "vllm:num_requests_waiting[60s]",
                           'vllm:num_requests_waiting_by_reason{reason="deferred"}[60s]']
    assert queries[-1] == 'vllm:engine_sleep_state{sleep_state="awake"}[60s]'
    assert slot_queries(SGLANG, 90.5)[0] == 'sglang:num_running_reqs{priority=""}[90500ms]'
    one = slot_queries(SGLANG, 60, {"namespace": "ns", "pod": 'a"b\\c'})
    assert one[0] == 'sglang:num_running_reqs{priority="",namespace="ns",pod="a\\"b\\\\c"}[60s]'
    assert up_query(60, "pod") == 'up{pod!=""}[60s]'
    assert up_query(60, "pod", {"namespace": "n", "pod": "p"}) == 'up{namespace="n",pod="p"}[60s]'
    assert quote("x\ny") == '"x\\ny"'


def test_url_problems() -> None:
    assert url_problem("http://prometheus.monitoring:9090") is None
    assert url_problem("https://thanos/prefix/") is None
    assert "http(s)" in str(url_problem("prometheus:9090"))
    assert "credentials" in str(url_problem("http://u:p@h"))
    assert "query" in str(url_problem("http://h/?x=1"))
    assert "not a URL" in str(url_problem("http://h:99999"))


EXPOSITION = """\
vllm:num_requests_running{engine="0",model_name="m",lora="a"} 2
vllm:num_requests_running{engine="0",model_name="m",lora="b"} 3
vllm:num_requests_running{engine="1",model_name="m"} 0
vllm:num_requests_waiting{engine="0",model_name="m"} 7
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 4
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 3
vllm:generation_tokens_total{engine="0",model_name="m"} 123
vllm:generation_tokens_total{engine="1",model_name="m"} 9
vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="awake"} 0
"""


Answer = list[tuple[dict[str, str], list[tuple[float, float]]]]


def _series_of(text: str, extra: dict[str, str], t: float) -> dict[str, Answer]:
    out: dict[str, Answer] = {}
    for line in text.splitlines():
        head, value = line.rsplit(" ", 1)
        name, _, inner = head.partition("{")
        labels = dict(pair.split("=") for pair in inner.rstrip("}").split(",")) if inner else {}
        labels = {k: v.strip('"') for k, v in labels.items()}
        out.setdefault(name, []).append(({**labels, **extra, "__name__": name},
                                         [(t - 30, -1.0), (t, float(value))]))
    return out


def _answers(by_name: dict[str, list], profile=VLLM) -> list:  # type: ignore[no-untyped-def, type-arg]
    return [None if s is None else [x for x in by_name.get(s.metric, []) if s.matches(x[0])]
            for s in signal_slots(profile)]


def test_grouping_gives_each_pod_what_parsing_its_body_gives() -> None:
    a = _series_of(EXPOSITION, {"namespace": "ns", "pod": "a", "instance": "10.0.0.1:8000"}, 1000.0)
    b = _series_of('vllm:num_requests_running{engine="0",model_name="m"} 1\n'
                   'vllm:generation_tokens_total{engine="0",model_name="m"} 5', {"namespace": "ns", "pod": "b"}, 990.0)
    merged = {k: a.get(k, []) + b.get(k, []) for k in set(a) | set(b)}
    pods = group_pods(VLLM, _answers(merged), [], "namespace", "pod")
    assert set(pods) == {("ns", "a"), ("ns", "b")}
    assert pods[("ns", "a")].parsed.series == parse_exposition(EXPOSITION, VLLM).series
    engine0, engine1 = pods[("ns", "a")].parsed.series
    assert (engine0.running, engine0.waiting, engine0.progress[0]) == (5.0, 3.0, 123.0)  # newest samples, summed
    assert (engine1.running, engine1.paused) == (0.0, 1.0)  # data-parallel engines apart; awake 0 = asleep
    assert pods[("ns", "a")].t == 1000.0 and pods[("ns", "b")].t == 990.0
    assert not pods[("ns", "a")].down


def test_collapse_labels_take_the_largest_like_the_parser() -> None:
    body = ('sglang:num_running_reqs{tp_rank="0",model_name="m"} 4\n'
            'sglang:num_running_reqs{tp_rank="1",model_name="m"} 4\n'
            'sglang:realtime_tokens_total{tp_rank="0",model_name="m",mode="decode"} 10\n'
            'sglang:realtime_tokens_total{tp_rank="1",model_name="m",mode="decode"} 12\n')
    pods = group_pods(SGLANG, _answers(_series_of(body, {"namespace": "n", "pod": "p"}, 5.0), SGLANG), [],
                      "namespace", "pod")
    assert pods[("n", "p")].parsed.series == parse_exposition(body, SGLANG).series
    assert pods[("n", "p")].parsed.series[0].running == 4.0


def test_up_zero_on_the_newest_up_sample_marks_the_pod_down_and_series_without_pod_labels_are_ignored() -> None:
    answers = _answers(_series_of('vllm:num_requests_running{engine="0"} 1', {"namespace": "n", "pod": "p"}, 5.0))
    answers[0].append(({"__name__": "vllm:num_requests_running", "namespace": "n"}, [(5.0, 9.0)]))
    up = [({"namespace": "n", "pod": "p", "job": "a"}, [(1.0, 0.0), (4.0, 1.0)]),
          ({"namespace": "n", "pod": "q"}, [(1.0, 1.0), (4.0, 0.0)])]
    pods = group_pods(VLLM, answers, up, "namespace", "pod")
    assert set(pods) == {("n", "p")} and not pods[("n", "p")].down
    up.append(({"namespace": "n", "pod": "p", "job": "b"}, [(4.0, math.nan)]))
    assert group_pods(VLLM, answers, up, "namespace", "pod")[("n", "p")].down


def test_reading_outcomes() -> None:
    parsed = parse_exposition('vllm:num_requests_running 1\nvllm:generation_tokens_total 2\n', VLLM)
    empty = aggregate_samples([], VLLM)
    assert reading_outcome(None, None)[0] == "prometheus_unknown"
    assert reading_outcome(PodReading(empty, 5.0), None)[0] == "prometheus_unknown"
    assert reading_outcome(PodReading(parsed, 5.0, down=True), None)[0] == "prometheus_unknown"
    assert reading_outcome(PodReading(parsed, 5.0), None) == ("ok", "")
    assert reading_outcome(PodReading(parsed, 5.0), 5.0) == ("ok", "same")
    assert reading_outcome(PodReading(parsed, 5.5), 5.0) == ("ok", "")


def test_a_sample_that_does_not_satisfy_its_slots_selector_is_ignored() -> None:
    labels = {"engine": "0", "reason": "capacity"}
    slots: list[list[tuple[dict[str, str], float]]] = [[({"engine": "0"}, 2.0)], [({"engine": "0"}, 7.0)],
                                                       [(labels, 4.0)], [({"engine": "0"}, 1.0)]]
    (series,) = aggregate_samples(slots, VLLM).series
    assert (series.running, series.waiting) == (2.0, 7.0)  # a reason="capacity" sample is not a deferred one
    slots[2] = [({**labels, "reason": "deferred"}, 4.0)]
    assert aggregate_samples(slots, VLLM).series[0].waiting == 3.0
