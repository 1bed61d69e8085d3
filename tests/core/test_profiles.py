"""profiles: built-in series, selectors, lookup errors, custom profiles from configuration."""

from __future__ import annotations

import dataclasses

import pytest

from watchdog.core.profiles import (
    PROFILES,
    Selector,
    custom_profile,
    get_profile,
    parse_selector,
    target_profile,
)


def test_builtin_profiles_and_ports() -> None:
    assert sorted(PROFILES) == ["llamacpp", "lmdeploy", "sglang", "trtllm", "vllm"]
    vllm = get_profile("vllm")
    assert (str(vllm.running), str(vllm.waiting), vllm.default_port, vllm.metrics_path) == (
        "vllm:num_requests_running", "vllm:num_requests_waiting", 8000, "/metrics")  # fmt: skip
    assert [str(s) for s in vllm.waiting_ignored] == ['vllm:num_requests_waiting_by_reason{reason="deferred"}']
    assert vllm.progress_names()[:4] == ("vllm:generation_tokens_total", "vllm:iteration_tokens_total_count",
                                         "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert [s.kind for s in vllm.progress[2:4]] == ["gauge", "gauge"]
    # Moving only when a prompt's first token / a request is out: no evidence alone.
    assert {str(s) for s in vllm.progress if s.completion_only} == {"vllm:prompt_tokens_total",
                                                                   "vllm:request_success_total"}
    assert [str(s) for s in vllm.awake] == ['vllm:engine_sleep_state{sleep_state="awake"}']
    assert vllm.engine_labels == ("engine", "model_name") and vllm.collapse_labels == ()
    sglang = get_profile("sglang")
    assert (sglang.progress_names()[0], sglang.default_port) == ("sglang:realtime_tokens_total", 30000)
    assert set(sglang.engine_labels) == {"dp_rank", "engine_type", "model_name"}
    assert {"tp_rank", "pp_rank"} <= set(sglang.collapse_labels)
    llama = get_profile("llamacpp")
    assert llama.progress_names() == ("llamacpp:n_decode_total", "llamacpp:tokens_predicted_total",
                                      "llamacpp:prompt_tokens_total")
    assert [s.completion_only for s in llama.progress] == [False, True, True]
    trtllm = get_profile("trtllm")
    assert (trtllm.metrics_path, trtllm.default_port, str(trtllm.running)) == (
        "/prometheus/metrics", 8000, "trtllm_num_requests_running")
    assert all(s.completion_only for s in trtllm.progress)  # nothing moves while one request runs


def test_every_builtin_signal_says_when_it_moves() -> None:
    for profile in PROFILES.values():
        for selector in (*profile.progress, *profile.paused, *profile.awake, profile.running):
            assert selector.note, f"{profile.name}: {selector} has no note"


def test_metric_names_each_once() -> None:
    names = get_profile("vllm").metric_names()
    assert names[:3] == ("vllm:num_requests_running", "vllm:num_requests_waiting",
                         "vllm:num_requests_waiting_by_reason")
    assert len(names) == len(set(names)) and "vllm:engine_sleep_state" in names


@pytest.mark.parametrize(("text", "expected"), [
    ("vllm:x_total", Selector("vllm:x_total", (), "counter")),
    ("vllm:x", Selector("vllm:x", (), "gauge")),
    ('s:r_total{mode="decode"}', Selector("s:r_total", (("mode", "decode", True),), "counter")),
    ('s:r{ a = "1" , b!="" }', Selector("s:r", (("a", "1", True), ("b", "", False)), "gauge")),
    ("t_x_total@completion", Selector("t_x_total", (), "counter", completion_only=True)),
])  # fmt: skip
def test_parse_selector(text: str, expected: Selector) -> None:
    assert parse_selector(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("has space", "not a metric sample name"),
    ("x{mode=decode}", "expected label="),
    ('x{mode="decode"', "must end with"),
    ('x{__name__="x"}', "reserved label name"),
    ('x{a=~"b"}', "expected label="),
])  # fmt: skip
def test_parse_selector_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_selector(text)


def test_selector_matching_reads_a_missing_label_as_empty() -> None:
    sel = parse_selector('x{priority="",reason!="deferred"}')
    assert sel.matches({}) and sel.matches({"reason": "capacity"})
    assert not sel.matches({"reason": "deferred"}) and not sel.matches({"priority": "1"})
    assert str(sel) == 'x{priority="",reason!="deferred"}'


def test_unknown_profile_message() -> None:
    with pytest.raises(ValueError, match=r"^unknown profile 'x' \(known: llamacpp, lmdeploy, sglang, trtllm, vllm\)$"):
        get_profile("x")


def test_profiles_are_read_only() -> None:
    with pytest.raises(TypeError):
        PROFILES["x"] = get_profile("vllm")  # type: ignore[index]


def test_custom_profile_overrides_base() -> None:
    prof = custom_profile(
        "tgi-ish", {"running": "tgi_batch_current_size", "waiting": "",
                    "progress": ['tgi_batch_inference_count{method="decode"}', "tgi_request_count@completion"],
                    "engine_labels": ["pod", "pod"], "collapse_labels": ["rank"], "default_port": 3000,
                    "metrics_path": "/m"}, base="llamacpp",
    )  # fmt: skip
    assert prof.name == "tgi-ish" and prof.running == Selector("tgi_batch_current_size", kind="gauge")
    assert prof.waiting is None
    assert prof.progress == (Selector("tgi_batch_inference_count", (("method", "decode", True),), "counter"),
                             Selector("tgi_request_count", (), "counter", completion_only=True))
    assert prof.engine_labels == ("pod",) and prof.collapse_labels == ("rank",)
    assert (prof.default_port, prof.metrics_path) == (3000, "/m")
    assert prof.paused == get_profile("llamacpp").paused  # from the base
    assert custom_profile("same", {}) == dataclasses.replace(get_profile("vllm"), name="same")


def test_legacy_counter_keys_add_to_the_base_progress_signals() -> None:
    """A config written when these keys named the only counters keeps the base's newer signals (the KV-cache
    gauge that keeps a vLLM V1 long prefill alive): the keys add, never replace."""
    base = get_profile("vllm").progress
    prof = custom_profile("old", {"generation_tokens": "a_total", "prompt_tokens": "b_total", "heartbeat": None})
    assert prof.progress == (*base, Selector("a_total", (), "counter"), Selector("b_total", (), "counter"))
    same = custom_profile("old", {"heartbeat": "vllm:iteration_tokens_total_count"})
    assert same.progress == base and "vllm:kv_cache_usage_perc" in same.progress_names()


def test_target_profile_is_the_builtin_without_fields() -> None:
    assert target_profile("t", "sglang", {}) is get_profile("sglang")
    assert target_profile("t", "sglang", {"default_port": 1}).default_port == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"runing": "x"}, "unknown key 'runing'"),
        ({"name": "x"}, "unknown key 'name'"),
        ({"running": None}, "running: expected a series selector"),
        ({"running": "has space"}, "running: 'has space'"),
        ({"generation_tokens": 3}, "generation_tokens: expected a series selector"),
        ({"progress": []}, "progress must name at least one"),
        ({"progress": 3}, "progress must be a list"),
        ({"progress": ["ok_total"], "heartbeat": "x_total"}, "either progress or the legacy"),
        ({"paused": ["x{"]}, "paused: 'x{'"),
        ({"running": "x@completion"}, "running: @completion marks progress signals only"),
        ({"progress": ['x{a=~"b"}']}, "=~ and !~ are not supported"),
        ({"engine_labels": ["tp"], "collapse_labels": ["tp"]}, "tp cannot be both an engine label and a collapsed"),
        ({"engine_labels": "engine"}, "engine_labels must be a list"),
        ({"engine_labels": ["ok", "bad-label"]}, "engine_labels: 'bad-label'"),
        ({"collapse_labels": ["__reserved"]}, "collapse_labels: '__reserved'"),
        ({"metrics_path": "metrics"}, "metrics_path must be an absolute"),
        ({"default_port": 0}, "default_port must be"),
        ({"default_port": True}, "default_port must be"),
        ({"default_port": "8000"}, "default_port must be"),
    ],
)
def test_custom_profile_errors_name_the_key(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        custom_profile("mine", fields)


def test_custom_profile_bad_base_or_name() -> None:
    with pytest.raises(ValueError, match="unknown profile 'tgi'"):
        custom_profile("mine", {}, base="tgi")
    with pytest.raises(ValueError, match="name"):
        custom_profile(" ", {})


def test_lmdeploy_profile_reads_its_own_metric_names_and_engine_labels() -> None:
    """Issue 41 item 3: LMDeploy 0.18.0's PrometheusStatLogger (lmdeploy/metrics/loggers.py): labels model_name
    and engine (its dp rank); tokens and the iteration histogram move with every streamed output, the running
    gauge and the KV-cache gauge with the api_server's 10 s schedule refresh."""
    lmdeploy = get_profile("lmdeploy")
    assert (str(lmdeploy.running), str(lmdeploy.waiting), lmdeploy.default_port, lmdeploy.metrics_path) == (
        "lmdeploy:num_requests_running", "lmdeploy:num_requests_waiting", 23333, "/metrics")
    assert lmdeploy.engine_labels == ("engine", "model_name")
    assert [(str(s), s.kind) for s in lmdeploy.progress if not s.completion_only] == [
        ("lmdeploy:generation_tokens_total", "counter"), ("lmdeploy:iteration_tokens_total_count", "counter"),
        ("lmdeploy:gpu_cache_usage_perc", "gauge")]
    assert {str(s) for s in lmdeploy.progress if s.completion_only} == {"lmdeploy:prompt_tokens_total",
                                                                       "lmdeploy:request_success_total"}
    assert not lmdeploy.paused and not lmdeploy.awake
