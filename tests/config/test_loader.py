"""The settings table: precedence, derived names, every problem reported at once with its source."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from watchdog.config.flags import add_flags, flags_from_args
from watchdog.config.loader import ConfigError, load_config
from watchdog.config.settings import SETTINGS
from watchdog.core.model import DEFAULT_TARGETS


def test_defaults() -> None:
    c = load_config(env={})
    assert (c.window_seconds, c.scrape_interval_seconds, c.scrape_deadline_seconds) == (120.0, 15.0, 3.0)
    assert (c.min_samples, c.dry_run, c.log_format, c.grace_period_seconds) == (3, False, "json", None)
    assert c.targets == DEFAULT_TARGETS
    selectors = {t.pod_selector for t in c.targets}
    assert selectors == {"inference.llmkube.dev/runtime=vllm", "app.kubernetes.io/name=vllm"}
    assert all(t.port == "http" and t.path == "/metrics" and t.profile == "vllm" for t in c.targets)


def test_names_derive_from_one_table() -> None:
    s = next(s for s in SETTINGS if s.name == "scrape_interval_seconds")
    assert (s.flag, s.env, s.key) == ("--scrape-interval-seconds", "WATCHDOG_SCRAPE_INTERVAL_SECONDS",
                                      "scrapeIntervalSeconds")
    assert len({s.env for s in SETTINGS}) == len({s.key for s in SETTINGS}) == len(SETTINGS)


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("windowSeconds: 300\nminSamples: 4\nlogFormat: text\n")
    c = load_config(str(f), env={"WATCHDOG_WINDOW_SECONDS": "200", "WATCHDOG_MIN_SAMPLES": "5"},
                    flags={"window_seconds": "180"})
    assert (c.window_seconds, c.min_samples, c.log_format) == (180.0, 5, "text")


def test_config_file_from_env_and_targets(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("targets:\n- name: sg\n  podSelector: app=sglang\n  profile: sglang\n  port: 30000\n")
    c = load_config(env={"WATCHDOG_CONFIG": str(f)})
    assert [(t.name, t.pod_selector, t.profile, t.port, t.path) for t in c.targets] == [
        ("sg", "app=sglang", "sglang", "30000", "/metrics")]


def test_every_problem_at_once_with_file_line_and_key(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("dryRun: true\nwindowSecond: 100\nminSamples: zero\ntargets:\n- name: a\n  podSelctor: x=y\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={"WATCHDOG_LOG_LEVEL": "loud"}, flags={"workers": "-1"})
    problems = err.value.problems
    assert f"{f}:2 key 'windowSecond': unknown setting (did you mean 'windowSeconds'?)" in problems
    assert f"{f}:3 key 'minSamples': 'zero' is not an integer" in problems
    assert any("key 'targets'[0]: unknown key 'podSelctor' (did you mean 'podSelector'?)" in p for p in problems)
    assert "env WATCHDOG_LOG_LEVEL: 'loud' is not one of debug, info, warning, error" in problems
    assert "--workers: '-1' is below the minimum 0" in problems


def test_cross_checks() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env={"WATCHDOG_WINDOW_SECONDS": "30", "WATCHDOG_SCRAPE_DEADLINE_SECONDS": "20"})
    text = str(err.value)
    assert "must be at least 3 scrape intervals" in text and "must be shorter than scrapeIntervalSeconds" in text


@pytest.mark.parametrize("text, message", [
    ("a: [", "not valid YAML"), ("- 1\n- 2\n", "must be a mapping"),
])
def test_bad_files(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(str(f), env={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.yaml"), env={})


@pytest.mark.parametrize("path", ["metrics", "//evil.example/metrics", "/../x", "/a@b"])
def test_target_path_must_be_a_plain_absolute_path(path: str) -> None:
    with pytest.raises(ConfigError, match="must be an absolute URL path"):
        load_config(env={"WATCHDOG_TARGETS": f'[{{"name": "a", "podSelector": "x=y", "path": "{path}"}}]'})


def test_flags_derive_from_the_table() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--dry-run", "--window-seconds", "60", "--no-require-controller"])
    assert flags_from_args(args) == {"dry_run": True, "window_seconds": "60", "require_controller": False}
    c = load_config(env={}, flags=flags_from_args(args))
    assert (c.dry_run, c.window_seconds, c.require_controller) == (True, 60.0, False)
    assert "WATCHDOG_WINDOW_SECONDS" in parser.format_help()


def test_a_config_file_that_is_not_text(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    assert err.value.problems == [f"{f}: not UTF-8 text (byte 0): expected a YAML config file"]


def test_unknown_watchdog_env_vars_are_warnings_and_service_links_are_not() -> None:
    c = load_config(env={"WATCHDOG_WINDOW_SECNDS": "60", "WATCHDOG_SERVICE_HOST": "10.0.0.1",
                         "WATCHDOG_PORT_8080_TCP_ADDR": "10.0.0.1", "WATCHDOG_PORT": "tcp://10.0.0.1:8080"})
    assert c.warnings == ("env WATCHDOG_WINDOW_SECNDS is not a setting and is ignored "
                          "(did you mean 'WATCHDOG_WINDOW_SECONDS'?)",)
    assert c.window_seconds == 120.0


def test_targets_env_that_is_not_yaml_is_one_problem() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env={"WATCHDOG_TARGETS": "[unclosed"})
    assert err.value.problems == ["env WATCHDOG_TARGETS: not valid YAML/JSON"]


def test_custom_profile_with_progress_selectors_and_the_profile_metrics_path(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "targets:\n"
        "  - {name: tgi, podSelector: app=tgi, profile: llamacpp, metrics: {running: tgi_batch_current_size,\n"
        "     progress: ['tgi_batch_inference_count{method=\"decode\"}', 'tgi_request_count@completion'],\n"
        "     engine_labels: [], metrics_path: /tgi/metrics}}\n"
        "  - {name: trt, podSelector: app=trt, profile: trtllm}\n"
        "  - {name: trt-own-path, podSelector: app=trt2, profile: trtllm, path: /metrics}\n")
    c = load_config(str(f), env={})
    assert [(t.name, t.path) for t in c.targets] == [("tgi", "/tgi/metrics"), ("trt", "/prometheus/metrics"),
                                                     ("trt-own-path", "/metrics")]
    assert c.targets[0].metrics["progress"] == ['tgi_batch_inference_count{method="decode"}',
                                                "tgi_request_count@completion"]


def test_a_bad_custom_selector_names_target_and_key() -> None:
    with pytest.raises(ConfigError, match=r"WATCHDOG_TARGETS\[0\]: custom profile 'a': progress: 'bad name'"):
        load_config(env={"WATCHDOG_TARGETS": '[{"name": "a", "podSelector": "x=y", "metrics": '
                                             '{"progress": ["bad name"]}}]'})


@pytest.mark.parametrize(("value", "ok"), [("0", True), ("600", True), ("599", False), ("300", False)])
def test_completion_only_window_is_off_or_long(value: str, ok: bool) -> None:
    env = {"WATCHDOG_COMPLETION_ONLY_WINDOW_SECONDS": value}
    if ok:
        assert load_config(env=env).completion_only_window_seconds == float(value)
    else:
        with pytest.raises(ConfigError, match=r"completionOnlyWindowSeconds .* must be 0 .off. or at least 600 s"):
            load_config(env=env)
    with pytest.raises(ConfigError, match="at least windowSeconds"):
        load_config(env={**env, "WATCHDOG_COMPLETION_ONLY_WINDOW_SECONDS": "700", "WATCHDOG_WINDOW_SECONDS": "800"})


def test_the_brake_configmap_cannot_be_the_ledger() -> None:
    env = {"WATCHDOG_LEASE_NAME": "foo", "WATCHDOG_PAUSE_CONFIG_MAP": "foo-ledger"}
    with pytest.raises(ConfigError, match="pauseConfigMap 'foo-ledger' is the deletion ledger's ConfigMap"):
        load_config(env=env)
    assert load_config(env={**env, "WATCHDOG_BUDGET_LEDGER": "false"}).pause_config_map == "foo-ledger"
