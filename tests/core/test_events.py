"""Event messages: facts first, composed from the detector's structured verdict (``stall_message``); control
characters from pod-controlled strings (metric label values, names, annotation values) are written as visible
escapes by the one rule, ``escape_controls``, before the 1 KiB cut, which keeps the head."""

from __future__ import annotations

import datetime as dt
import unicodedata

import pytest

from watchdog.core.detector import Sample, Verdict, detect
from watchdog.core.events import (
    MAX_ENGINE_KEY,
    MAX_MESSAGE,
    escape_controls,
    event_body,
    frees_phrase,
    stall_message,
)
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.profiles import Selector

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


#: A stalled verdict as the detector makes it (135 s without progress, 21 running, 4 waiting).
SIGNALS = (Selector("vllm:generation_tokens_total"), Selector("vllm:prompt_tokens_total"),
           Selector("vllm:kv_cache_usage_perc", kind="gauge"))
STALLED = detect([Sample(t, 21.0, (456789.0, 1234567.0, 0.25), 4.0) for t in range(0, 136, 15)], 120.0,
                 signals=SIGNALS)
FACTS = ("no progress for 135 s, 21 requests running (4 waiting), frozen vllm:generation_tokens_total=456789 "
         "vllm:prompt_tokens_total=1234567 vllm:kv_cache_usage_perc=0.25 since 2025-01-02T03:01:50Z")


def test_the_detector_sets_the_facts_the_message_needs() -> None:
    assert (STALLED.state, STALLED.running, STALLED.waiting, STALLED.window_s, STALLED.busy_samples) == (
        "stalled", 21.0, 4.0, 120.0, 10)
    assert STALLED.frozen == (("vllm:generation_tokens_total", 456789.0), ("vllm:prompt_tokens_total", 1234567.0),
                              ("vllm:kv_cache_usage_perc", 0.25))


@pytest.mark.parametrize(("outcome", "rule", "why", "text"), [
    ("deleted", "", "", "Deleted pod ml/llama-0 engine {engine=\"0\"}: {facts}. Why: stalled past the 120 s window "
     "over 10 busy samples."),
    ("evicted", "", "", "Evicted pod ml/llama-0 engine {engine=\"0\"}: {facts}. Why: stalled past the 120 s window "
     "over 10 busy samples."),
    ("dry_run", "", "namespace is labelled dry-run", "Would delete pod ml/llama-0 engine {engine=\"0\"}: {facts}. "
     "Why: stalled past the 120 s window over 10 busy samples; dry-run, namespace is labelled dry-run."),
    ("deferred", "owner", "Deployment ml/llama already lost a pod; waiting for its replacement to be Ready",
     "Deferred deletion of pod ml/llama-0 engine {engine=\"0\"}: {facts}. Why: rule owner, Deployment ml/llama "
     "already lost a pod; waiting for its replacement to be Ready."),
])
def test_the_message_leads_with_the_facts_in_the_on_call_order(outcome: str, rule: str, why: str, text: str) -> None:
    since = NOW - dt.timedelta(seconds=135)
    message = stall_message(outcome, "ml/llama-0", 'engine="0"', STALLED, since, rule=rule,  # type: ignore[arg-type]
                            why=why)
    assert message == text.replace("{facts}", FACTS)
    assert "window" not in message.split("Why:")[0] and STALLED.reason not in message


def test_a_deferral_says_when_it_may_proceed_in_seconds_and_wall_time() -> None:
    """Issue 30 item 3: the budget's deferral says when it frees, "in N s" AND the wall-clock UTC time (the
    caller's wall clock plus the policy's seconds, rounded up to the second), then what frees it."""
    wall = NOW.timestamp() + 0.25
    frees = frees_phrase(450.0, "when the oldest counted deletion in ml leaves the rolling 600 s window", wall)
    assert frees == ("may proceed in 450 s (at 2025-01-02T03:11:36Z), when the oldest counted deletion in ml leaves "
                     "the rolling 600 s window")  # 03:04:05.25 + 450 s = 03:11:35.25, rounded up
    assert frees_phrase(449.2, "", NOW.timestamp()) == "may proceed in 450 s (at 2025-01-02T03:11:35Z)"
    assert frees_phrase(0.0, "when the warm-up ends", NOW.timestamp()) == (
        "may proceed in 0 s (at 2025-01-02T03:04:05Z), when the warm-up ends")
    assert frees_phrase(None, "when the replacement pod is Ready", wall) == (
        "may proceed when the replacement pod is Ready")
    assert frees_phrase(None, "", wall) == ""
    since = NOW - dt.timedelta(seconds=135)
    message = stall_message("deferred", "ml/llama-0", 'engine="0"', STALLED, since, rule="namespace_budget",
                            why="namespace budget used: 1 deletions in ml in the last 600 s", frees=frees)
    assert message == (f"Deferred deletion of pod ml/llama-0 engine {{engine=\"0\"}}: {FACTS}. Why: rule "
                       "namespace_budget, namespace budget used: 1 deletions in ml in the last 600 s; may proceed in "
                       "450 s (at 2025-01-02T03:11:36Z), when the oldest counted deletion in ml leaves the rolling "
                       "600 s window.")
    body = event_body("ml", {"name": "llama-0", "kind": "Pod", "apiVersion": "v1", "uid": "u"}, "R", message, "i", NOW)
    assert body["message"] == message  # well inside the 1 KiB


def test_unknown_waiting_an_unlabelled_engine_and_no_since_are_left_out() -> None:
    verdict = Verdict("stalled", 200.0, "", running=3.0, busy_samples=5, frozen=(("heartbeat", 7.0),),
                      window_s=180.0)
    assert stall_message("deleted", "ml/p", "", verdict, None) == (
        "Deleted pod ml/p: no progress for 200 s, 3 requests running, frozen heartbeat=7. Why: stalled past the "
        "180 s window over 5 busy samples.")


def test_a_stall_that_reached_the_window_within_its_slack_says_so() -> None:
    verdict = Verdict("stalled", 119.4, "", running=3.0, busy_samples=9, frozen=(("heartbeat", 7.0),),
                      window_s=120.0)
    assert stall_message("deleted", "ml/p", "", verdict, None) == (
        "Deleted pod ml/p: no progress for 119 s, 3 requests running, frozen heartbeat=7. Why: stalled past the "
        "120 s window (less its 1 s slack) over 9 busy samples.")
    short = Verdict("stalled", 29.8, "", running=1.0, busy_samples=4, window_s=30.0)
    assert "past the 30 s window (less its 0.3 s slack) over 4" in stall_message("deleted", "ml/p", "", short, None)


def test_a_long_engine_key_is_cut_so_the_facts_stay_in_the_head() -> None:
    key = 'model_name="' + "m" * 5000 + '"'
    message = stall_message("deleted", "ml/p", key, STALLED, NOW)
    engine = message.split(" engine {", 1)[1].split("}: ", 1)[0]
    assert len(engine) == MAX_ENGINE_KEY and engine.endswith("...")
    body = event_body("ml", POD, "StalledPodDeleted", message, "wd-0", NOW)
    assert body["message"] == message and "no progress for 135 s" in body["message"]


def test_a_message_over_1_kib_is_cut_at_the_tail() -> None:
    verdict = Verdict("stalled", 130.0, "", running=2.0, busy_samples=9, window_s=120.0,
                      frozen=tuple((f"signal_{i}_{'x' * 40}", float(i)) for i in range(40)))
    body = event_body("ml", POD, "StalledPodDeleted", stall_message("deleted", "ml/p", 'engine="0"', verdict, NOW),
                      "wd-0", NOW)
    assert len(body["message"].encode()) <= MAX_MESSAGE and body["message"].endswith("...")
    assert body["message"].startswith('Deleted pod ml/p engine {engine="0"}: no progress for 130 s, 2 requests '
                                      "running, frozen signal_0_")


def test_event_message_carrying_a_hostile_series_key_is_escaped() -> None:
    # The message as the remediator writes it: the engine series key (metric label values, pod-controlled).
    series = EngineSnapshot((("model_name", HOSTILE),), 3.0, None, (1.0, 1.0))
    body = event_body("ml", POD, "StalledPodDeleted", stall_message("deleted", "ml/llama-0", series.key, STALLED,
                                                                    None), "wd-0", NOW)
    assert body["message"].startswith('Deleted pod ml/llama-0 engine {model_name="\\r\\x1b[31mFAKE\\n"}: no ')
    assert raw_controls(body["message"]) == []


def test_escaping_happens_before_the_cut() -> None:
    body = event_body("ml", POD, "StalledPodDryRun", "\x1b" * 2000, "wd-0", NOW)
    assert len(body["message"].encode()) <= MAX_MESSAGE and body["message"].endswith("...")
    assert raw_controls(body["message"]) == [] and body["message"].startswith("\\x1b\\x1b")
