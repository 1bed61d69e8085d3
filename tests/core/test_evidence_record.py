"""The evidence record's pure parts: the bounded episode history, the log tail's bounds, the record."""

from __future__ import annotations

import json

from watchdog.core.detector import DetectorState, Sample, Verdict
from watchdog.core.events import MAX_ENGINE_KEY
from watchdog.core.evidence import (
    HISTORY_LEN,
    HistoryEntry,
    build_record,
    evidence_id,
    log_tail,
    pointer,
    remember,
    snapshot_values,
)
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.profiles import Selector

SIGNALS = (Selector("generation_tokens"), Selector("prompt_tokens"))


def fold(samples: list[Sample]) -> list[tuple[str, int | None]]:
    """(verdict state, history length or None) after each sample, as the cycle folds them."""
    detector, history, out = DetectorState(60.0, min_samples=3, signals=SIGNALS), None, []
    for sample in samples:
        verdict = detector.observe(sample)
        history = remember(history, sample, verdict, SIGNALS)
        out.append((verdict.state, None if history is None else len(history)))
    return out


def test_history_is_kept_only_inside_a_suspect_or_stalled_episode() -> None:
    samples = [Sample(0, 0.0, (1.0, 1.0)), Sample(15, 2.0, (2.0, 2.0)), Sample(30, 2.0, (2.0, 2.0)),
               Sample(45, None), Sample(60, 2.0, (2.0, 2.0)), Sample(75, 2.0, (2.0, 2.0)),
               Sample(90, 2.0, (2.0, 2.0)), Sample(105, 2.0, (3.0, 2.0)), Sample(120, None)]
    assert fold(samples) == [
        ("idle", None), ("progressing", None),  # a healthy engine holds nothing
        ("suspect", 1), ("unknown", 2),  # a failed scrape inside the episode is kept
        ("suspect", 3), ("stalled", 4), ("stalled", 5),
        ("progressing", None),  # progress ends the episode: dropped
        ("unknown", None),  # unknown outside an episode opens nothing
    ]


def test_idle_and_paused_end_the_history_too() -> None:
    busy = [Sample(0, 2.0, (1.0, 1.0)), Sample(15, 2.0, (1.0, 1.0))]
    assert fold([*busy, Sample(30, 0.0, (1.0, 1.0))])[-1] == ("idle", None)
    assert fold([*busy, Sample(30, 2.0, (1.0, 1.0), paused=1.0)])[-1] == ("paused", None)


def test_history_is_capped_at_the_newest_samples() -> None:
    samples = [Sample(float(t), 2.0, (5.0, 5.0)) for t in range(0, 15 * (HISTORY_LEN + 10), 15)]
    detector, history = DetectorState(60.0, signals=SIGNALS), None
    for sample in samples:
        history = remember(history, sample, detector.observe(sample), SIGNALS)
    assert history is not None and len(history) == HISTORY_LEN == 32
    assert history[0].t == samples[-HISTORY_LEN].t and history[-1].t == samples[-1].t
    assert history[-1] == HistoryEntry(samples[-1].t, "stalled", 2.0, None, (5.0, 5.0),
                                       ("generation_tokens", "prompt_tokens"))
    assert history[-1].progress == (("generation_tokens", 5.0), ("prompt_tokens", 5.0))
    assert history[0].names is history[-1].names  # one tuple of names for every entry


def test_log_tail_keeps_the_newest_whole_lines_within_the_cap() -> None:
    raw = b"".join(b"line %03d\n" % i for i in range(100))  # 9 bytes a line
    assert log_tail(raw, 4096) == (raw.decode(), False)
    text, cut = log_tail(raw, 30)
    assert (text, cut) == ("line 097\nline 098\nline 099\n", True)
    assert len(text.encode()) <= 30
    text, cut = log_tail(b"x" * 100, 10)  # one line longer than the cap: its last bytes
    assert (text, cut) == ("x" * 10, True)


def test_log_tail_of_tenant_text_is_decoded_and_escaped_when_logged() -> None:
    raw = b"ok\n\x1b[31mred\rforged\n\xff\xfe bad utf-8 \xe2\x80\xa8 sep\n"
    text, cut = log_tail(raw, 1024)
    assert not cut and "\ufffd\ufffd bad utf-8 \u2028 sep" in text  # invalid bytes replaced, never raised
    line = json.dumps({"log": text}, ensure_ascii=True)  # what the JSON formatter writes
    assert "\x1b" not in line and "\r" not in line and "\n" not in line and "\u2028" not in line
    assert "\\u001b[31mred\\rforged" in line


VERDICT = Verdict("stalled", 130.0, "stalled: ...", t=130.0, running=21.0, busy_samples=9, waiting=3.0,
                  frozen=(("generation_tokens", 456789.0),), window_s=120.0)


def test_the_record_holds_verdict_history_final_values_and_log() -> None:
    history = [HistoryEntry(100.0, "suspect", 21.0, 3.0, (456789.0,), ("generation_tokens",)),
               HistoryEntry(130.0, "stalled", 21.0, None, (None,), ("generation_tokens",))]
    final = snapshot_values(EngineSnapshot((("engine", "0"),), 21.0, 3.0, (456789.0, None)), SIGNALS)
    record = build_record("b452e9f6-1796116897", pod="ml/llama-0", uid="b452e9f6-2696", engine='engine="0"',
                          outcome="delete", verdict=VERDICT, history=history, final=final, final_from="confirmation",
                          log="log unavailable: read log: HTTP 403 Forbidden", now=140.0, wall_now=1796116897.0)
    assert record == {
        "id": "b452e9f6-1796116897", "pod": "ml/llama-0", "uid": "b452e9f6-2696", "engine": 'engine="0"',
        "outcome": "delete", "dry_run": False,
        "verdict": {"state": "stalled", "stalled_for_s": 130.0, "running": 21.0, "waiting": 3.0, "busy_samples": 9,
                    "window_s": 120.0, "window_source": "global", "frozen": {"generation_tokens": 456789.0}},
        "history": [
            {"age_s": 40.0, "at": "2026-12-01T09:20:57Z", "state": "suspect", "running": 21.0, "waiting": 3.0,
             "progress": {"generation_tokens": 456789.0}},
            {"age_s": 10.0, "at": "2026-12-01T09:21:27Z", "state": "stalled", "running": 21.0, "waiting": None,
             "progress": {"generation_tokens": None}}],
        "final": {"running": 21.0, "waiting": 3.0, "paused": None,
                  "progress": {"generation_tokens": 456789.0, "prompt_tokens": None}},
        "final_from": "confirmation", "log": "log unavailable: read log: HTTP 403 Forbidden", "log_cut": False,
    }


def test_the_record_is_bounded_whatever_the_pod_sends() -> None:
    history = [HistoryEntry(float(t), "stalled", 1.0, 1.0, (1.0,), ("generation_tokens",)) for t in range(500)]
    text, _ = log_tail(b"\x1b" * 10_000_000, 65536)
    record = build_record("x-1", pod="ml/p", uid="u", engine="e" * 10_000, outcome="dry_run", verdict=VERDICT,
                          history=history, final=None, final_from="cycle", log=text, now=500.0, wall_now=1e9)
    assert len(record["history"]) == HISTORY_LEN and record["history"][-1]["age_s"] == 1.0
    assert len(record["engine"]) == MAX_ENGINE_KEY and record["dry_run"] is True
    assert len(record["log"].encode()) == 65536
    # The JSON line: every escaped control byte is 6 characters, so at most 6 x the byte cap plus the rest.
    assert len(json.dumps(record, ensure_ascii=True)) < 6 * 65536 + 8192


def test_the_id_and_the_events_pointer_are_short() -> None:
    eid = evidence_id("b452e9f6-2696-46b3-b3c1-48c41636d62c", 1796116897.9)
    assert eid == "b452e9f6-1796116897"
    assert pointer(eid) == "evidence: b452e9f6-1796116897 in the watchdog log"
