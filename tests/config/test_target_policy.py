"""targets[].windowSeconds, minSamples, action, completionOnlyWindowSeconds: each read by the global setting's row
(same type, bounds and choices) and held to the same cross-checks as the global value, each problem naming the
target's key; maxPodWindowSeconds, the annotation ceiling, is a row of the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.config.loader import ConfigError, load_config
from watchdog.config.settings import target_to_dict


def load(tmp_path: Path, target: str, extra: str = ""):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.yaml"
    path.write_text(f"{extra}targets:\n  - {{name: a, podSelector: app=a}}\n  - {{name: b, podSelector: app=b, "
                    f"{target}}}\n")
    return load_config(str(path), env={})


def problems(tmp_path: Path, target: str, extra: str = "") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, target, extra)
    return caught.value.problems


def test_a_target_sets_its_own_policy_and_keeps_the_rest_global(tmp_path: Path) -> None:
    config = load(tmp_path, "windowSeconds: 600, minSamples: 5, action: evict, completionOnlyWindowSeconds: 900",
                  "maxPodWindowSeconds: 7200\n")
    plain, own = config.targets
    assert (own.window_seconds, own.min_samples, own.action, own.completion_only_window_seconds) == (
        600.0, 5, "evict", 900.0)
    assert config.policy_of(plain)[0] == config.base_policy
    assert config.policy_of(own)[0].describe() == (
        "window 600 s (target), min samples 5, action evict, completion-only window 900 s")
    assert config.max_pod_window_seconds == 7200.0
    assert target_to_dict(own)["windowSeconds"] == 600.0 and "windowSeconds" not in target_to_dict(plain)


@pytest.mark.parametrize(("target", "problem"), [
    ("windowSeconds: 0.5", "'targets'[1].windowSeconds: 0.5 is below the minimum 1"),
    ("windowSeconds: 90000", "'targets'[1].windowSeconds: 90000 is above the maximum 86400"),
    ("windowSeconds: .nan", "'targets'[1].windowSeconds: nan is not a finite number"),
    ("windowSeconds: soon", "'targets'[1].windowSeconds: 'soon' is not a number"),
    ("minSamples: 0", "'targets'[1].minSamples: 0 is below the minimum 1"),
    ("action: kill", "'targets'[1].action: 'kill' is not one of delete, evict, quarantine"),
    ("completionOnlyWindowSeconds: -1", "'targets'[1].completionOnlyWindowSeconds: -1 is below the minimum 0"),
])
def test_a_target_value_is_held_to_the_global_rows_bounds(tmp_path: Path, target: str, problem: str) -> None:
    [line] = problems(tmp_path, target)
    assert line.endswith(problem), line


@pytest.mark.parametrize(("target", "extra", "problem"), [
    ("windowSeconds: 30", "scrapeIntervalSeconds: 15\n",
     "targets[1].windowSeconds (30) must be at least 3 scrape intervals (3 x 15 s)"),
    ("completionOnlyWindowSeconds: 300", "",
     "targets[1].completionOnlyWindowSeconds (300) must be 0 (off) or at least 600 s and at least windowSeconds"),
    ("windowSeconds: 900", "completionOnlyWindowSeconds: 600\n",
     "completionOnlyWindowSeconds (600) must be 0 (off) or at least 600 s and at least targets[1].windowSeconds "
     "(900)"),
    ("action: quarantine", "", "targets[1].action quarantine needs quarantine: true"),
    ("windowSeconds: 60", "quarantine: true\nquarantineAfterSeconds: 60\n",
     "quarantineAfterSeconds (60) must be shorter than targets[1].windowSeconds (60)"),
])
def test_a_target_value_is_held_to_the_global_cross_checks(tmp_path: Path, target: str, extra: str,
                                                           problem: str) -> None:
    [line] = problems(tmp_path, target, extra)
    assert problem in line and line.endswith("(target 'b')") and "\n" not in line, line


def test_watch_namespaces_refuses_a_namespace_that_is_never_watched() -> None:
    """Fresh-eyes finding: kube-system in watchNamespaces would get a Role with pod deletes for nothing."""
    from watchdog.config.loader import ConfigError, load_config

    try:
        load_config(None, flags={"watch_namespaces": "team-a,kube-system"}, env={})
    except ConfigError as exc:
        assert exc.problems == ["watchNamespaces names kube-system, which is never watched: leave it out (its Role "
                                "would grant pod deletes for nothing)"]
    else:
        raise AssertionError("kube-system accepted in watchNamespaces")


def test_watch_namespaces_in_the_config_file_is_the_charts_list_or_the_comma_string(tmp_path: Path) -> None:
    """One shape across the chart and the config file: a YAML list (the chart writes its top-level list as is);
    the comma-separated string of the env var and flag is read there too."""
    from watchdog.config.loader import ConfigError, load_config

    for text in ("watchNamespaces: [team-a, team-b]\n", "watchNamespaces: team-a,team-b\n"):
        (tmp_path / "c.yaml").write_text(text)
        assert load_config(str(tmp_path / "c.yaml"), env={}).namespaces_watched == ("team-a", "team-b")
    (tmp_path / "c.yaml").write_text("watchNamespaces: [team-a, 3]\n")
    try:
        load_config(str(tmp_path / "c.yaml"), env={})
    except ConfigError as exc:
        assert exc.problems[0].endswith("key 'watchNamespaces': expected a string, got list")
    else:
        raise AssertionError("a list with a number accepted")


# -- issue 36 item 4: one pod, one policy ------------------------------------------------------------------------
@pytest.mark.parametrize(("first", "second"), [
    ("app.kubernetes.io/name=vllm", "app.kubernetes.io/name=vllm"),
    ("app=x,tier=gpu", " tier == gpu , app=x"),
    ("app in (b,a),!old", "!old,app in (a, b, a)"),
    ("app=x,app=x", "app=x"),
])
def test_targets_with_the_same_pod_selector_are_refused_in_one_line(tmp_path: Path, first: str, second: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"targets:\n  - {{name: vllm, podSelector: '{first}'}}\n  - {{name: mid, podSelector: other=1}}\n"
                    f"  - {{name: x, podSelector: '{second}', windowSeconds: 600}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), env={})
    assert caught.value.problems == [
        f"{path}:1 key 'targets': targets[0] ('vllm') and targets[2] ('x') have the same podSelector {second!r}: "
        "every pod of one is a pod of the other; merge them into one target"]


@pytest.mark.parametrize("second", ["app in (a,b,c)", "app=x,tier!=gpu", "app notin (a,b)", "app"])
def test_selectors_that_differ_are_taken_and_resolved_per_pod_at_run_time(tmp_path: Path, second: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"targets:\n  - {{name: a, podSelector: 'app in (b,a)'}}\n"
                    f"  - {{name: b, podSelector: '{second}'}}\n")
    assert [t.name for t in load_config(str(path), env={}).targets] == ["a", "b"]


def test_a_target_path_may_carry_a_query_for_llama_server_router_mode(tmp_path: Path) -> None:
    """Issue 41 item 6: one model of a llama-server router, ``path: /metrics?model=NAME`` (the scrape sends it as
    it is: tests/adapters/test_scrape.py)."""
    config = load(tmp_path, "profile: llamacpp, path: '/metrics?model=qwen3-8b'")
    assert config.targets[1].path == "/metrics?model=qwen3-8b"
