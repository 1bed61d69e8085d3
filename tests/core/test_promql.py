"""The Prometheus queries of a profile and the grouping of their answers into per-pod engine series: the same
aggregation as a scraped body (one rule, core/parsing.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.promfake import FakePrometheus, Item, evaluate, stored
from watchdog.core.parsing import engine_series, parse_exposition, signal_slots
from watchdog.core.profiles import Profile, get_profile, label_name_problem
from watchdog.core.promql import (
    Answers,
    Names,
    Plan,
    PodKey,
    PodReading,
    Scope,
    instance_host,
    matchers,
    matchers_problem,
    plan,
    quote,
    reading_outcome,
    scopes,
    url_problem,
)

VLLM = get_profile("vllm")
SGLANG = get_profile("sglang")


def test_one_aggregating_instant_query_per_signal_slot_plus_time_and_up() -> None:
    queries = plan(VLLM, 60, "namespace", "pod")
    assert len(queries.slots) == len(signal_slots(VLLM)) == 13
    assert queries.slots[0] == ("max by (namespace, pod, engine, model_name, instance) (sum by (namespace, pod, "
                                "engine, model_name, job, instance, endpoint, container, service) (last_over_time("
                                "vllm:num_requests_running[60s]) and vllm:num_requests_running))")
    assert queries.slots[2] == ('max by (namespace, pod, engine, model_name, reason, instance) (sum by (namespace, '
                                'pod, engine, model_name, reason, job, instance, endpoint, container, service) ('
                                'last_over_time(vllm:num_requests_waiting_by_reason{reason="deferred"}[60s]) and '
                                'vllm:num_requests_waiting_by_reason{reason="deferred"}))')
    # each engine series' time, when it is its target's newest (the target: every label but the engine's own)
    assert queries.time == ("max by (namespace, pod, engine, model_name, instance) (timestamp("
                            "vllm:num_requests_running) >= ignoring(engine, model_name) group_left max without "
                            "(engine, model_name) (timestamp(vllm:num_requests_running)))")
    assert queries.up == 'min by (namespace, pod, instance) (last_over_time(up{pod!=""}[60s]))'
    assert len(queries.queries()) == 15  # whatever the number of pods
    # the rows carry their scrape identity: the instance
    assert queries.labels_of(str(queries.slots[2])) == ("namespace", "pod", "engine", "model_name", "instance")
    assert queries.labels_of(queries.time) == ("namespace", "pod", "engine", "model_name", "instance")
    assert queries.labels_of(queries.up) == ("namespace", "pod", "instance")
    sglang = plan(SGLANG, 90.5, "ns", "name")
    assert sglang.slots[0] == (
        "max by (ns, name, dp_rank, engine_type, model_name, priority, instance) (sum by (ns, name, dp_rank, "
        "engine_type, model_name, priority, moe_ep_rank, pid, pp_rank, tp_rank, job, instance, endpoint, container, "
        'service) (last_over_time(sglang:num_running_reqs{priority=""}[90500ms]) and '
        'sglang:num_running_reqs{priority=""}))')
    one = plan(SGLANG, 60, "namespace", "pod", Scope("ns", ('a"b\\c',)).matchers("namespace", "pod"))
    assert 'sglang:num_running_reqs{priority="",namespace="ns",pod="a\\"b\\\\c"}[60s]' in str(one.slots[0])
    assert one.up == 'min by (namespace, pod, instance) (last_over_time(up{namespace="ns",pod="a\\"b\\\\c"}[60s]))'
    assert quote("x\ny") == '"x\\ny"'
    assert label_name_problem("pod") is None and label_name_problem("kubernetes_pod_name") is None
    assert label_name_problem("__name__") and label_name_problem("pod-name") and label_name_problem("")


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
vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="deferred"} 0
vllm:num_requests_waiting{engine="1",model_name="m"} 0
"""


def _items(text: str, extra: dict[str, str], t: float) -> list[Item]:
    """The series of an exposition as Prometheus stores them after scraping it at ``t`` (and at ``t - 30``)."""
    return [(key, [(t - 30, -1.0), *samples]) for key, samples in stored(text, extra, t)]


def _values(labels: dict[str, str], queries: Plan, query: str) -> tuple[str | None, ...]:
    """A row's labels as the Prometheus client hands them over: the values of the names the query is read by."""
    return tuple(labels.get(name) for name in queries.labels_of(query))


def _read(profile: Profile, items: list[Item], at: float, scope: Scope | None = None,
          ips: dict[PodKey, str] | None = None) -> dict[PodKey, PodReading]:
    return _fold(profile, items, at, scope, ips).pods()


def _fold(profile: Profile, items: list[Item], at: float, scope: Scope | None = None,
          ips: dict[PodKey, str] | None = None, **names: Any) -> Answers:
    """The answers to ``profile``'s queries over ``items`` at ``at`` folded in (``names``: Answers' prior, names)."""
    queries = plan(profile, 60, "namespace", "pod", scope.matchers("namespace", "pod") if scope else ())
    reading = Answers(profile, queries, ips, **names)
    for query in queries.queries():
        rows = evaluate(query, at, items)
        assert rows is not None, query
        reading.add(query, [(_values(labels, queries, query), value) for labels, value in rows])
    return reading


def test_grouping_gives_each_pod_what_parsing_its_body_gives() -> None:
    a = _items(EXPOSITION, {"namespace": "ns", "pod": "a", "instance": "10.0.0.1:8000", "job": "j"}, 1000.0)
    a += _items('vllm:generation_tokens_total{engine="0",model_name="m"} 100', {"namespace": "ns", "pod": "a",
                "instance": "10.0.0.1:8000", "job": "other"}, 1000.0)  # a second target on the same pod
    b = _items('vllm:num_requests_running{engine="0",model_name="m"} 1\n'
               'vllm:generation_tokens_total{engine="0",model_name="m"} 5', {"namespace": "ns", "pod": "b"}, 990.0)
    pods = _read(VLLM, a + b, 1000.0)
    assert set(pods) == {("ns", "a"), ("ns", "b")}
    (engine0, engine1) = pods[("ns", "a")].parsed.series
    # newest samples; of the two targets' copies the largest, never their sum
    assert (engine0.running, engine0.waiting, engine0.progress[0]) == (5.0, 3.0, 123.0)
    assert (engine1.running, engine1.paused) == (0.0, 1.0)  # data-parallel engines apart; awake 0 = asleep
    assert pods[("ns", "a")].t == 1000.0 and pods[("ns", "b")].t == 990.0
    assert not pods[("ns", "a")].down
    alone = _read(VLLM, _items(EXPOSITION, {"namespace": "ns", "pod": "a"}, 1000.0), 1000.0)
    direct = parse_exposition(EXPOSITION, VLLM)
    assert alone[("ns", "a")].parsed.series == direct.series
    assert alone[("ns", "a")].parsed.found_families == direct.found_families  # 0-valued rows found too
    assert set(_read(VLLM, a + b, 1000.0, Scope("ns", ("b",)))) == {("ns", "b")}


@pytest.mark.parametrize("apart", ["job", "endpoint", "service", "container"])
def test_a_pod_scraped_by_two_jobs_reads_as_one_and_its_counters_never_fall_when_one_copy_ages_out(
        apart: str) -> None:
    # A ServiceMonitor every 2 s and a PodMonitor every 10 s on one wedged pod (counters frozen at 500). Summed,
    # the pair read 1000, then 500 once the slower copy aged out of the range: a counter reset, i.e. progress.
    # The copies may differ by job, or (instance relabelled to the pod name) by Kubernetes SD's other labels.
    with FakePrometheus() as prom:
        for copy, every in (("service", 2.0), ("pod", 10.0)):
            labels = {"namespace": "n", "pod": "p", "engine": "0", "job": "j", "instance": "p", apart: copy}
            for i in range(int(20 / every) + 1):
                prom.add("vllm:num_requests_running", labels, 1000.0 + i * every, 21.0)
                prom.add("vllm:generation_tokens_total", labels, 1000.0 + i * every, 500.0)
        items = list(prom.series.items())
    queries = plan(VLLM, 5, "namespace", "pod")
    for at in (1011.0, 1017.0):  # both copies in the 5 s range; then only the faster one's
        reading = Answers(VLLM, queries)
        for query in queries.queries():
            rows = evaluate(query, at, items)
            assert rows is not None, query
            reading.add(query, [(_values(labels, queries, query), value) for labels, value in rows])
        (engine,) = reading.pods()[("n", "p")].parsed.series
        assert (engine.running, engine.progress[0]) == (21.0, 500.0), at


def test_an_engine_series_gone_from_its_pods_metrics_is_absent_at_once_while_the_pod_goes_on() -> None:
    with FakePrometheus() as prom:  # its scrapes: two engines at 1000, then only engine 0 at 1005 (a marker for 1)
        two = ('vllm:num_requests_running{engine="0"} 5\nvllm:generation_tokens_total{engine="0"} %d\n'
               'vllm:num_requests_running{engine="1"} 5\nvllm:generation_tokens_total{engine="1"} 7\n')
        prom.feed(two % 100, {"namespace": "n", "pod": "p"}, 1000.0)
        prom.feed(two.split("vllm:num_requests_running{engine=\"1\"}")[0] % 200, {"namespace": "n", "pod": "p"},
                  1005.0)
        items = list(prom.series.items())
    pods = _read(VLLM, items, 1006.0)
    (engine0,) = pods[("n", "p")].parsed.series  # engine 1's last values (5 running, 7 tokens) are not fed again
    assert engine0.labels == (("engine", "0"),) and engine0.progress[0] == 200.0
    assert pods[("n", "p")].t == 1005.0
    assert set(_read(VLLM, items, 1004.0)[("n", "p")].parsed.series[i].labels for i in range(2)) == {
        (("engine", "0"),), (("engine", "1"),)}  # before that scrape both were there


def test_an_engine_series_gone_without_a_staleness_marker_is_absent_while_the_pod_goes_on() -> None:
    # Samples with explicit timestamps, federation, a job removed from the configuration: no marker is written,
    # so Prometheus answers engine 1's last values for the whole staleness bound. Its own newest running sample
    # is older than its pod's: it is left out (unknown), never fed again as fresh (frozen: a stall).
    with FakePrometheus() as prom:
        for t, tokens in ((1000.0, 100.0), (1005.0, 200.0), (1010.0, 300.0)):
            for engine in ("0", "1") if t == 1000.0 else ("0",):
                labels = {"namespace": "n", "pod": "p", "engine": engine}
                prom.add("vllm:num_requests_running", labels, t, 5.0)
                prom.add("vllm:generation_tokens_total", labels, t, tokens if engine == "0" else 7.0)
        items = list(prom.series.items())
    for at in (1006.0, 1011.0):
        reading = _read(VLLM, items, at)[("n", "p")]
        assert [e.labels for e in reading.parsed.series] == [(("engine", "0"),)] and reading.t == at - 1
    assert len(_read(VLLM, items, 1004.0)[("n", "p")].parsed.series) == 2  # before engine 0's next scrape: both


@pytest.mark.parametrize("apart", [
    {"a": {"instance": "10.0.0.1:8000"}, "b": {"instance": "10.0.0.1:8001"}},
    # instance relabelled to the pod's name: the two ports differ only by their endpoint (and container)
    {"a": {"instance": "p", "endpoint": "http"}, "b": {"instance": "p", "endpoint": "http-b"}},
])
def test_engines_of_one_pod_on_two_scrape_targets_are_each_read_at_their_own_targets_time(
        apart: dict[str, dict[str, str]]) -> None:
    # Two containers on two ports: engine 0 scraped at 1000, 1005, 1010 (target a), engine 1 at 1002, 1007
    # (target b). Both are in their target's latest scrape, each at its own time; on target a, engine 2 left
    # /metrics without a marker at 1000 (explicit timestamps): older than its target's newest, so it is left out.
    with FakePrometheus() as prom:
        for target, engines, times in (("a", ("0", "2"), (1000.0, 1005.0, 1010.0)), ("b", ("1",), (1002.0, 1007.0))):
            for t in times:
                for engine in engines:
                    if engine == "2" and t > 1000.0:
                        continue
                    labels = {"namespace": "n", "pod": "p", "engine": engine, "job": "j", **apart[target]}
                    prom.add("vllm:num_requests_running", labels, t, 5.0)
                    prom.add("vllm:generation_tokens_total", labels, t, t)
        items = list(prom.series.items())
    reading = _read(VLLM, items, 1008.0)[("n", "p")]
    assert [(e.labels, e.progress[0]) for e in reading.parsed.series] == [
        ((("engine", "0"),), 1005.0), ((("engine", "1"),), 1007.0)]
    assert dict(reading.times) == {(("engine", "0"),): 1005.0, (("engine", "1"),): 1007.0} and reading.t == 1007.0
    reading = _read(VLLM, items, 1011.0)[("n", "p")]  # target b's engine is still in its latest scrape
    assert dict(reading.times) == {(("engine", "0"),): 1010.0, (("engine", "1"),): 1007.0} and reading.t == 1010.0
    assert len(_read(VLLM, items, 1001.0)[("n", "p")].parsed.series) == 2  # before a's next scrape: 0 and 2


def test_a_series_older_than_the_staleness_bound_is_absent() -> None:
    items = _items('vllm:num_requests_running{engine="0"} 1\nvllm:generation_tokens_total{engine="0"} 5',
                   {"namespace": "n", "pod": "p"}, 1000.0)
    assert _read(VLLM, items, 1059.0)[("n", "p")].parsed.series[0].progress[0] == 5.0
    assert _read(VLLM, items, 1061.0) == {}


def test_collapse_labels_take_the_largest_like_the_parser() -> None:
    body = ('sglang:num_running_reqs{tp_rank="0",model_name="m"} 4\n'
            'sglang:num_running_reqs{tp_rank="1",model_name="m"} 4\n'
            'sglang:realtime_tokens_total{tp_rank="0",model_name="m",mode="decode"} 10\n'
            'sglang:realtime_tokens_total{tp_rank="1",model_name="m",mode="decode"} 12\n'
            'sglang:realtime_tokens_total{tp_rank="1",model_name="m",mode="prefill"} 3\n')
    pods = _read(SGLANG, _items(body, {"namespace": "n", "pod": "p"}, 5.0), 5.0)
    assert pods[("n", "p")].parsed.series == parse_exposition(body, SGLANG).series
    (series,) = pods[("n", "p")].parsed.series
    assert (series.running, series.progress[0]) == (4.0, 15.0)  # largest rank of the sums over mode


def test_up_zero_on_any_target_marks_the_pod_down_and_rows_without_pod_labels_are_ignored() -> None:
    items = _items('vllm:num_requests_running{engine="0"} 1', {"namespace": "n", "pod": "p"}, 5.0)
    items += _items('vllm:num_requests_running{engine="0"} 9', {"namespace": "n"}, 5.0)
    items += _items("up 1", {"namespace": "n", "pod": "p", "job": "a"}, 4.0)
    items += _items("up 0", {"namespace": "n", "pod": "q"}, 4.0)
    pods = _read(VLLM, items, 5.0)
    assert set(pods) == {("n", "p"), ("n", "q")} and not pods[("n", "p")].down
    # q has no series left (Prometheus marked them stale when its scrapes began to fail): down, and said so
    assert pods[("n", "q")].down and not pods[("n", "q")].parsed.series
    assert reading_outcome(pods[("n", "q")]) == (
        "prometheus_unknown", "Prometheus' newest up sample of its target is 0 (its scrapes fail)")
    items += _items("up 0", {"namespace": "n", "pod": "p", "job": "b"}, 4.0)  # its second target fails
    assert _read(VLLM, items, 5.0)[("n", "p")].down


def test_reading_outcomes() -> None:
    parsed = parse_exposition('vllm:num_requests_running 1\nvllm:generation_tokens_total 2\n', VLLM)
    empty = engine_series({}, VLLM, ())
    assert reading_outcome(None)[0] == "prometheus_unknown"
    timed = {(): 5.0}
    assert reading_outcome(PodReading(empty, times=timed))[0] == "prometheus_unknown"
    assert reading_outcome(PodReading(parsed, down=True, times=timed))[0] == "prometheus_unknown"
    assert reading_outcome(PodReading(parsed, times=timed)) == ("ok", "")
    assert reading_outcome(PodReading(parsed))[0] == "prometheus_unknown"  # no time


def test_rows_apart_only_by_a_matcher_label_are_summed_and_found_names_the_slots_with_rows() -> None:
    waiting = next(i for i, s in enumerate(signal_slots(VLLM)) if s is not None and s.metric.endswith("by_reason"))
    queries = plan(VLLM, 60, "namespace", "pod")
    reading = Answers(VLLM, queries)
    pod = {"namespace": "n", "pod": "p", "engine": "0"}

    def add(query: str | None, rows: list[tuple[dict[str, str], float, float]]) -> None:
        assert query is not None
        reading.add(query, [(_values(labels, queries, query), v) for labels, _, v in rows])

    add(queries.slots[0], [(pod, 9.0, 2.0)])
    add(queries.slots[1], [(pod, 9.0, 7.0)])
    add(queries.slots[waiting], [({**pod, "reason": "deferred"}, 9.0, 1.0),
                                 ({**pod, "reason": "deferred", "x": "y"}, 9.0, 3.0)])
    add("something else", [(pod, 9.0, 100.0)])
    (series,) = reading.pods()[("n", "p")].parsed.series
    assert (series.running, series.waiting) == (2.0, 3.0)  # 7 waiting minus 1 + 3 deferred
    assert reading.pods()[("n", "p")].parsed.found_families == {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason"}


def test_the_documented_promql_is_what_the_vllm_profile_sends() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "prometheus.md").read_text()
    block = doc.split("**The PromQL it sends**", 1)[1].split("```promql\n", 1)[1].split("```", 1)[0]
    shown = [line for line in block.splitlines() if line and not line.startswith("#")]
    sent = plan(get_profile("vllm"), 60.0, "namespace", "pod").queries()
    assert len(shown) == len(set(shown)) == 15
    assert sorted(shown) == sorted(sent)


def test_a_second_time_answer_names_the_engines_whose_time_moved_while_the_values_were_read() -> None:
    queries = plan(VLLM, 60, "namespace", "pod")
    reading = Answers(VLLM, queries)
    zero, one = {"namespace": "n", "pod": "p", "engine": "0"}, {"namespace": "n", "pod": "p", "engine": "1"}
    time = queries.time
    reading.add(time, [(_values(zero, queries, time), 10.0), (_values(one, queries, time), 12.0)])
    for labels in (zero, one):
        reading.add(str(queries.slots[0]), [(_values(labels, queries, str(queries.slots[0])), 3.0)])
        reading.add(str(queries.slots[1]), [(_values(labels, queries, str(queries.slots[1])), 7.0)])
    assert reading.pods()[("n", "p")].moved == frozenset()  # answered once: nothing to compare
    reading.add(time, [(_values(zero, queries, time), 10.0), (_values(one, queries, time), 17.0)])
    pod = reading.pods()[("n", "p")]
    assert pod.moved == {(("engine", "1"),)} and dict(pod.times) == {(("engine", "0"),): 10.0, (("engine", "1"),): 12.0}


def test_rows_without_both_pod_labels_are_ignored_in_every_answer_and_up_marks_pods_down() -> None:
    queries = plan(VLLM, 60, "namespace", "pod")
    reading = Answers(VLLM, queries)
    pod, orphan = {"namespace": "n", "pod": "p", "engine": "0"}, {"pod": "p", "engine": "0"}
    for slot, value in ((0, 2.0), (1, 5.0)):
        query = str(queries.slots[slot])
        rows = [(_values(labels, queries, query), value) for labels in (orphan, pod, orphan)]
        reading.add(query, rows)  # the orphan twice in one answer, and again in the next
    time, up = queries.time, queries.up
    reading.add(time, [(_values(pod, queries, time), 9.0), (_values(orphan, queries, time), 8.0),
                       (_values({**pod, "pod": "q"}, queries, time), float("nan"))])
    reading.add(up, [(("n", "p", "i"), 1.0), (("n", "gone", "i"), 0.0), (("n", "nan", None), float("nan")),
                     ((None, "x", "i"), 0.0)])
    pods = reading.pods()
    assert set(pods) == {("n", "p"), ("n", "gone"), ("n", "nan")}
    assert not pods[("n", "p")].down and pods[("n", "p")].t == 9.0 and len(pods[("n", "p")].parsed.series) == 1
    assert pods[("n", "gone")].down and pods[("n", "nan")].down and not pods[("n", "gone")].parsed.series
    assert reading.times == {("n", "p"): {(("engine", "0"),): 9.0}}


def test_scopes_read_what_is_watched_per_namespace_in_chunks_with_names_escaped() -> None:
    pods = [("b", "z-0"), ("a", "llama.x-1"), ("a", "m-2"), ("a", "m-2")]
    assert scopes(pods) == [Scope("a", ("llama.x-1", "m-2")), Scope("b", ("z-0",))]
    assert Scope("a", ("llama.x-1", "m-2")).matchers("namespace", "pod") == [
        'namespace="a"', 'pod=~"llama\\\\.x-1|m-2"']  # the dot escaped (RE2), the backslash quoted (PromQL)
    assert Scope("b", ("z-0",)).matchers("ns", "name") == ['ns="b"', 'name="z-0"']
    many = [("a", f"pod-{i:04d}") for i in range(1000)]  # 9 bytes each with the bar: 9,000 bytes
    chunks = scopes(many, max_regex=4096)
    assert [len(c.pods) for c in chunks] == [455, 455, 90]
    assert [p for c in chunks for p in c.pods] == sorted(name for _, name in many)
    assert all(len("|".join(c.pods)) <= 4096 for c in chunks)


def test_extra_matchers_are_checked_and_added_to_every_query() -> None:
    assert matchers_problem('cluster="prod-1", region=~"eu-.*"') is None and matchers_problem("") is None
    assert matchers('cluster="prod-1", region=~"eu-.*"') == ('cluster="prod-1"', 'region=~"eu-.*"')
    for bad in ("cluster=prod-1", 'cluster="a" region="b"', '__name__="x"', 'cluster="a",', 'a=="b"'):
        assert matchers_problem(bad), bad
    queries = plan(VLLM, 60, "namespace", "pod", [*Scope("n", ("p",)).matchers("namespace", "pod"),
                                                   *matchers('cluster="prod-1"')])
    assert all('{namespace="n",pod="p",cluster="prod-1"}' in q or ',namespace="n",pod="p",cluster="prod-1"}' in q
               for q in queries.queries())


def test_instance_host() -> None:
    assert [instance_host(i) for i in ("10.0.0.5:8000", "[fd00::1]:8000", "10.0.0.5", "fd00::1", "pod-0")] == [
        "10.0.0.5", "fd00::1", "10.0.0.5", "fd00::1", "pod-0"]


def test_a_row_is_evidence_only_about_the_pod_whose_ip_scraped_it_and_two_instances_are_a_conflict() -> None:
    own = {"namespace": "n", "pod": "p", "instance": "10.0.0.5:8000", "job": "vllm"}
    body = 'vllm:num_requests_running{engine="0"} 1\nvllm:generation_tokens_total{engine="0"} 5\n'
    items = _items(body, own, 5.0)
    # team-b's exporter (honor_labels) labels a frozen engine 9 and a pause with pod p, from its own instance
    forged = {"namespace": "n", "pod": "p", "instance": "10.9.9.9:9100", "job": "team-b"}
    items += _items('vllm:num_requests_running{engine="9"} 4\nvllm:generation_tokens_total{engine="9"} 500\n'
                    'vllm:rl_weight_update_operations_in_flight{operation="x"} 1\n', forged, 5.0)
    items += _items("up 0", forged, 4.0)
    queries = plan(VLLM, 60, "namespace", "pod")
    reading = Answers(VLLM, queries, {("n", "p"): "10.0.0.5"})
    for query in queries.queries():
        rows = evaluate(query, 5.0, items)
        assert rows is not None
        reading.add(query, [(_values(labels, queries, query), value) for labels, value in rows])
    pod = reading.pods()[("n", "p")]
    assert [(s.labels, s.paused) for s in pod.parsed.series] == [((("engine", "0"),), None)] and not pod.down
    assert reading.dropped == 2  # engine 9 and the pod-scoped row: counted once per series, not per slot
    unchecked = _read(VLLM, items, 5.0)[("n", "p")]  # the forged rows believed: a paused engine 9, a down pod
    assert len(unchecked.parsed.series) == 2 and unchecked.down
    # the same engine series from the pod's IP on another port: which one is the engine is unknown
    items += _items('vllm:num_requests_running{engine="0"} 4\nvllm:generation_tokens_total{engine="0"} 9\n',
                    {**own, "instance": "10.0.0.5:9999"}, 5.0)
    pod = _read(VLLM, items, 5.0, ips={("n", "p"): "10.0.0.5"})[("n", "p")]
    assert reading_outcome(pod) == ("prometheus_unknown", 'conflict: the engine series {engine="0"} is claimed by '
                                    "2 instances (10.0.0.5:8000, 10.0.0.5:9999)")
    assert not pod.parsed.series and not pod.down


def test_what_the_rows_named_last_cycle_is_looked_up_and_the_pod_ip_still_checked_each_cycle() -> None:
    own = {"namespace": "n", "pod": "p", "instance": "10.0.0.5:8000", "job": "vllm"}
    items = _items('vllm:num_requests_running{engine="0"} 1\nvllm:generation_tokens_total{engine="0"} 5\n'
                   'vllm:num_requests_running{engine="1"} 2\nvllm:generation_tokens_total{engine="1"} 7\n', own, 5.0)
    ips = {("n", "p"): "10.0.0.5"}
    fresh = _fold(VLLM, items, 5.0, ips=ips).pods()
    first: dict[tuple[str | None, ...], Names] = {}
    assert _fold(VLLM, items, 5.0, ips=ips, names=first).pods() == fresh
    assert {n[1:] for n in first.values()} == {
        (("n", "p"), (("engine", "0"),), "10.0.0.5"), (("n", "p"), (("engine", "1"),), "10.0.0.5")}
    second: dict[tuple[str | None, ...], Names] = {}
    assert _fold(VLLM, items, 5.0, ips=ips, prior=first, names=second).pods() == fresh
    assert second == first  # carried over: bounded by what this cycle's answers named
    moved = _fold(VLLM, items, 5.0, ips={("n", "p"): "10.0.0.9"}, prior=second)  # the pod has another IP
    assert moved.pods() == {} and moved.dropped == 2  # its rows from the old IP are no evidence about it
