"""Event messages: control characters from pod-controlled strings (metric label values, names, annotation
values) are written as visible escapes by the one rule, ``escape_controls``, before the 1 KiB cut."""

from __future__ import annotations

import datetime as dt
import unicodedata

import pytest

from watchdog.core.events import MAX_MESSAGE, escape_controls, event_body
from watchdog.core.parsing import EngineSnapshot

HOSTILE = "\r\x1b[31mFAKE\n"  # a label value: return to column 0, turn red, forge a new line
NOW = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
POD = {"apiVersion": "v1", "kind": "Pod", "name": "llama-0", "uid": "u"}


def raw_controls(text: str) -> list[str]:
    """Characters a terminal or a log viewer would act on rather than show."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in "\u202e\u2066"]


def test_the_hostile_label_value_is_escaped() -> None:
    assert escape_controls(HOSTILE) == "\\r\\x1b[31mFAKE\\n"


@pytest.mark.parametrize(("char", "shown"), [
    ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\x00", "\\x00"), ("\x07", "\\x07"), ("\x08", "\\x08"),
    ("\x1b", "\\x1b"), ("\x1f", "\\x1f"), ("\x7f", "\\x7f"), ("\x85", "\\x85"), ("\x9b", "\\x9b"),
    ("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\u202e", "\\u202e"), ("\u2066", "\\u2066"),
])
def test_every_kind_of_control_character_is_escaped(char: str, shown: str) -> None:
    assert escape_controls(f"a{char}b") == f"a{shown}b"


def test_every_c0_and_c1_control_and_separator_is_escaped() -> None:
    everything = "".join(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029))
    assert raw_controls(escape_controls(everything)) == []


@pytest.mark.parametrize("text", ["plain", "llama-0 (ml/llama-0)", 'model_name="a\\\\b"', "é ü 中文 🙂", "", "a b"])
def test_printable_text_is_unchanged(text: str) -> None:
    assert escape_controls(text) == text


def test_event_message_carrying_a_hostile_series_key_is_escaped() -> None:
    # The message as the remediator writes it: the engine series key (metric label values, pod-controlled).
    series = EngineSnapshot((("model_name", HOSTILE),), 3.0, None, (1.0, 1.0))
    body = event_body("ml", POD, "StalledPodDeleted", f"deleted: engine series {{{series.key}}} of pod ml/llama-0",
                      "wd-0", NOW)
    assert body["message"] == 'deleted: engine series {model_name="\\r\\x1b[31mFAKE\\n"} of pod ml/llama-0'
    assert raw_controls(body["message"]) == []


def test_escaping_happens_before_the_cut() -> None:
    body = event_body("ml", POD, "StalledPodDryRun", "\x1b" * 2000, "wd-0", NOW)
    assert len(body["message"].encode()) <= MAX_MESSAGE and body["message"].endswith("...")
    assert raw_controls(body["message"]) == [] and body["message"].startswith("\\x1b\\x1b")
