"""Logging set-up: one JSON object per line (extras included, decision fields as top-level keys) or plain text;
decision fields built by ``facts``, counts written as ``idle=1 suspect=3``."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from watchdog.adapters.logs import FIELDS, JsonFormatter, TextFormatter, counts, facts, setup_logging
from watchdog.core.model import WatchedPod


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("watchdog.controller.cycle", logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_json_line_has_the_fixed_fields_and_the_extras() -> None:
    line = JsonFormatter().format(record("pod %s stalled", "ml/p", result="deleted", pods=3))
    assert "\n" not in line
    out = json.loads(line)
    assert {k: out[k] for k in ("level", "logger", "msg", "result", "pods")} == {
        "level": "warning", "logger": "watchdog.controller.cycle", "msg": "pod ml/p stalled", "result": "deleted",
        "pods": 3}
    assert out["ts"].endswith("Z") and "T" in out["ts"]
    assert set(out) == {"ts", "level", "logger", "msg", "result", "pods"}


TARGET = WatchedPod(uid="u-1", namespace="ml", name="llama-0", ip="10.0.0.5", port=8000, path="/metrics",
                    target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


def test_facts_names_the_pod_then_the_given_fields_and_drops_empty_ones() -> None:
    assert facts(TARGET, engine='engine="0"', state="stalled", rule="", result=None, reason="why") == {
        "namespace": "ml", "pod": "llama-0", "uid": "u-1", "engine": 'engine="0"', "state": "stalled",
        "reason": "why"}
    assert facts(namespace="ml", rule="namespace_breaker") == {"namespace": "ml", "rule": "namespace_breaker"}
    assert FIELDS == ("namespace", "pod", "uid", "engine", "state", "rule", "result", "reason")


def test_facts_refuses_a_field_outside_the_agreed_set() -> None:
    with pytest.raises(TypeError, match="not a decision field: series"):
        facts(TARGET, series="x")


def test_a_decision_line_has_its_fields_as_top_level_json_keys_and_a_plain_text_message() -> None:
    rec = record("remediation %s: %s", "deferred", "ml/llama-0: cluster budget used",
                 **facts(TARGET, engine='engine="0"', state="stalled", rule="budget", result="deferred",
                         reason="cluster budget used"))
    out = json.loads(JsonFormatter().format(rec))
    assert {k: out[k] for k in FIELDS} == {
        "namespace": "ml", "pod": "llama-0", "uid": "u-1", "engine": 'engine="0"', "state": "stalled",
        "rule": "budget", "result": "deferred", "reason": "cluster budget used"}
    text = TextFormatter().format(rec)
    assert text.endswith(" WARNING watchdog.controller.cycle: remediation deferred: ml/llama-0: cluster budget used")


@pytest.mark.parametrize(("counter", "text"), [
    ({"suspect": 3, "idle": 1}, "idle=1 suspect=3"), ({"ok": 2, "timeout": 0}, "ok=2"), ({}, "none")])
def test_counts_are_words_not_python_reprs(counter: dict[str, int], text: str) -> None:
    assert counts(counter) == text


def test_json_carries_the_exception_and_non_json_values_as_text() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        rec = record("failed", config={"path": object()})
        rec.exc_info = sys.exc_info()
    out = json.loads(JsonFormatter().format(rec))
    assert "ValueError: bad" in out["exc"]
    assert out["config"]["path"].startswith("<object object")


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_setup_logging_routes_watchdog_loggers_at_the_level(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    logging.getLogger("urllib3").setLevel(logging.DEBUG)  # set-up quiets noisy libraries to WARNING
    setup_logging(fmt, "debug")
    logging.getLogger("watchdog.controller.cycle").debug("hello %d", 7)
    logging.getLogger("urllib3").info("noise")
    logging.getLogger("apscheduler").warning("kept")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    if fmt == "json":
        assert json.loads(lines[0])["msg"] == "hello 7" and json.loads(lines[0])["level"] == "debug"
    else:
        assert lines[0].endswith("DEBUG   watchdog.controller.cycle: hello 7")
    assert "kept" in lines[1]
    assert len(logging.getLogger().handlers) == 1


@pytest.mark.usefixtures("restore_logging")
def test_setup_logging_level_filters(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("text", "warning")
    logging.getLogger("watchdog.controller.service").info("quiet")
    logging.getLogger("watchdog.controller.service").warning("loud")
    assert [line.split(": ", 1)[1] for line in capsys.readouterr().err.splitlines()] == ["loud"]


# -- control characters from pod-controlled strings (label values, names) -----------------------------------
HOSTILE = "\r\x1b[31mFAKE\n"  # return to column 0, turn the terminal red, forge a new line


def visible(line: str) -> bool:
    """No character a terminal or a log viewer would act on (C0, DEL, C1, U+2028/2029)."""
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in line)


@pytest.mark.usefixtures("restore_logging")
def test_text_log_escapes_control_characters_in_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("text", "info")
    log = logging.getLogger("watchdog.controller.remediator")
    log.warning("remediation deleted: engine series {model_name=%s} of pod %s", HOSTILE, "ml/p\u2028x\x85y")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and visible(err.rstrip("\n"))
    assert err.rstrip("\n").endswith(
        "remediation deleted: engine series {model_name=\\r\\x1b[31mFAKE\\n} of pod ml/p\\u2028x\\x85y")


@pytest.mark.usefixtures("restore_logging")
def test_text_log_keeps_a_traceback_multi_line_with_its_controls_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("text", "info")
    try:
        raise ValueError(f"bad label {HOSTILE}")
    except ValueError:
        logging.getLogger("watchdog.controller.cycle").exception("cycle failed for %s", HOSTILE)
    lines = capsys.readouterr().err.splitlines()
    assert all(visible(line) for line in lines)
    assert lines[0].endswith("cycle failed for \\r\\x1b[31mFAKE\\n")
    assert lines[1] == "Traceback (most recent call last):"
    # Line breaks inside a traceback are kept (it is multi-line text); everything else in it is escaped.
    assert lines[-2:] == ["ValueError: bad label \\r\\x1b[31mFAKE", ""]


def test_text_formatter_leaves_the_record_for_other_handlers() -> None:
    rec = record("value %s", HOSTILE)
    TextFormatter().format(rec)
    assert rec.getMessage() == f"value {HOSTILE}"


def test_json_log_escapes_control_characters_and_decodes_to_the_original() -> None:
    value = HOSTILE + "\x85\u2028\u2029\x7f"
    line = JsonFormatter().format(record("series {model_name=%s}", value, pod=f"ml/{value}"))
    assert line.isascii() and visible(line)  # every control character is a \uXXXX escape
    out = json.loads(line)
    assert out["msg"] == f"series {{model_name={value}}}" and out["pod"] == f"ml/{value}"


def test_the_evidence_record_is_one_escaped_json_value_in_both_formats() -> None:
    """The evidence record (tenant log text inside) stays on one line, every control character escaped."""
    evidence = {"id": "u-1-1796116897", "log": "step 1\n\x1b[2Jforged\r\u2028line\n", "history": [{"age_s": 5.0}]}
    rec = record("evidence for ml/p uid u-1: id %s", "u-1-1796116897", evidence=evidence)
    text = TextFormatter().format(rec)
    assert visible(text) and "\n" not in text
    head, body = text.split(" evidence=", 1)
    assert head.endswith("evidence for ml/p uid u-1: id u-1-1796116897") and json.loads(body) == evidence
    line = JsonFormatter().format(rec)
    assert line.isascii() and visible(line) and json.loads(line)["evidence"] == evidence
