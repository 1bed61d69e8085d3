"""Logging set-up: JSON lines (default, one object per line) or plain text for humans.

Decision lines (an engine series changing state, a remediation outcome, a scrape failing or recovering, the
cycle summary) carry their facts as fields (``extra=``, built by :func:`facts`): ``namespace``, ``pod``,
``uid``, ``engine`` (the series key), ``state``, ``rule``, ``result``, ``reason``. JSON writes every field as a
top-level key; the text format writes the message alone, which names the same facts in words. Counts go into
messages as ``idle=1 suspect=3`` (:func:`counts`), never as Python reprs.

Log messages carry pod-controlled strings (names, metric label values): neither format lets a control character
through raw. JSON escapes every control and non-ASCII character itself (``ensure_ascii``); the text format
writes them as visible escapes (:func:`watchdog.core.events.escape_controls`, the same rule as Event messages),
so a label value cannot move the cursor, colour the terminal or forge a log line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TypeVar

from watchdog.core.events import escape_controls
from watchdog.core.model import WatchedPod

_Name = TypeVar("_Name", bound=str)
#: The decision fields, in the order a reader wants them.
FIELDS = ("namespace", "pod", "uid", "engine", "state", "rule", "result", "reason")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def facts(target: WatchedPod | None = None, **values: str | None) -> dict[str, str]:
    """The ``extra=`` of a decision line: ``target``'s namespace, pod name and UID, then ``values`` (names from
    :data:`FIELDS`; empty or None values are left out). Raises ``TypeError`` on a name outside FIELDS."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise TypeError(f"not a decision field: {', '.join(sorted(unknown))} (fields: {', '.join(FIELDS)})")
    out = {"namespace": target.namespace, "pod": target.name, "uid": target.uid} if target is not None else {}
    out.update({k: v for k, v in values.items() if v})
    return out


def counts(counter: Mapping[_Name, int]) -> str:
    """``{"suspect": 3, "idle": 1}`` as ``idle=1 suspect=3`` (sorted by name; zeros left out), ``none`` when
    nothing is counted."""
    return " ".join(f"{name}={n}" for name, n in sorted(counter.items()) if n) or "none"


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., <extra fields>}`` per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # ensure_ascii (the default, kept on purpose): control characters, C1, U+2028/2029 all become \uXXXX.
        return json.dumps(out, default=str, ensure_ascii=True)


class TextFormatter(logging.Formatter):
    """``HH:MM:SS LEVEL logger: message`` with the message's control characters escaped; a traceback or stack
    keeps its line breaks, every other control character in it escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)  # the record other handlers see stays as it was
        safe.msg, safe.args = escape_controls(record.getMessage()), None
        if isinstance(getattr(record, "evidence", None), dict):  # the evidence record: one JSON value, escaped
            safe.msg += " evidence=" + json.dumps(record.__dict__["evidence"], default=str, ensure_ascii=True)
        if record.exc_info and not record.exc_text:
            safe.exc_text = self.formatException(record.exc_info)
        if safe.exc_text:
            safe.exc_text = _escape_lines(safe.exc_text)
        if record.stack_info:
            safe.stack_info = _escape_lines(record.stack_info)
        return super().format(safe)


def _escape_lines(text: str) -> str:
    return "\n".join(escape_controls(line) for line in text.split("\n"))


def setup_logging(fmt: str, level: str) -> None:
    """Send the ``watchdog`` loggers to stderr in ``fmt`` (json|text) at ``level``; quiet noisy libraries."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("watchdog").setLevel(level.upper())
    for noisy in ("apscheduler", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
