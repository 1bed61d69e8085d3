"""Logging set-up: one JSON object per line (extras included) or plain text."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from watchdog.adapters.logs import JsonFormatter, setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in ("", "watchdog", "urllib3", "apscheduler", "kubernetes")]
    handlers, levels = logging.getLogger().handlers[:], [lg.level for lg in loggers]
    yield
    logging.getLogger().handlers[:] = handlers
    for lg, level in zip(loggers, levels, strict=True):
        lg.setLevel(level)


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
