"""profiles: built-in metric names, lookup errors, custom profiles from configuration."""

from __future__ import annotations

import pytest

from watchdog.core.profiles import PROFILES, Profile, custom_profile, get_profile


def test_builtin_names_and_ports() -> None:
    assert sorted(PROFILES) == ["llamacpp", "sglang", "vllm"]
    vllm = get_profile("vllm")
    assert vllm == Profile(
        name="vllm", running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
        generation_tokens="vllm:generation_tokens_total", prompt_tokens="vllm:prompt_tokens_total",
        heartbeat="vllm:iteration_tokens_total_count", engine_labels=("engine", "model_name"), default_port=8000,
    )  # fmt: skip
    sglang = get_profile("sglang")
    assert (sglang.running, sglang.waiting, sglang.heartbeat, sglang.default_port) == (
        "sglang:num_running_reqs", "sglang:num_queue_reqs", None, 30000,
    )  # fmt: skip
    assert {"model_name", "tp_rank", "pp_rank", "engine_type"} <= set(sglang.engine_labels)
    llama = get_profile("llamacpp")
    assert (llama.running, llama.waiting, llama.generation_tokens, llama.prompt_tokens, llama.heartbeat) == (
        "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_tokens_total", "llamacpp:n_decode_total",
    )  # fmt: skip
    assert llama.engine_labels == () and llama.default_port == 8080


def test_metric_names_skip_absent() -> None:
    assert get_profile("sglang").metric_names() == (
        "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:generation_tokens_total",
        "sglang:prompt_tokens_total",
    )  # fmt: skip


def test_unknown_profile_message() -> None:
    with pytest.raises(ValueError, match=r"^unknown profile 'x' \(known: llamacpp, sglang, vllm\)$"):
        get_profile("x")


def test_profiles_are_read_only() -> None:
    with pytest.raises(TypeError):
        PROFILES["x"] = get_profile("vllm")  # type: ignore[index]


def test_custom_profile_overrides_base() -> None:
    prof = custom_profile(
        "tgi-ish", {"running": "tgi_batch_current_size", "waiting": "", "heartbeat": None,
                    "engine_labels": ["pod", "pod"], "default_port": 3000}, base="llamacpp",
    )  # fmt: skip
    assert prof.name == "tgi-ish" and prof.running == "tgi_batch_current_size"
    assert prof.waiting is None and prof.heartbeat is None
    assert prof.engine_labels == ("pod",) and prof.default_port == 3000
    assert prof.generation_tokens == "llamacpp:tokens_predicted_total"  # from the base
    assert custom_profile("same", {}) == Profile(**{**get_profile("vllm").__dict__, "name": "same"})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"runing": "x"}, "unknown key 'runing'"),
        ({"name": "x"}, "unknown key 'name'"),
        ({"running": None}, "running must be"),
        ({"running": "has space"}, "running must be"),
        ({"generation_tokens": 3}, "generation_tokens must be"),
        ({"heartbeat": "vllm:x{y}"}, "heartbeat must be"),
        ({"engine_labels": "engine"}, "engine_labels must be a list"),
        ({"engine_labels": ["ok", "bad-label"]}, "engine_labels: 'bad-label'"),
        ({"engine_labels": ["__reserved"]}, "engine_labels: '__reserved'"),
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
