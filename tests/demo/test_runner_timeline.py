"""The demo's timeline (issue 30 item 8): a long watchdog line is wrapped at a space, never cut mid-word."""

from __future__ import annotations

import time

import pytest

from watchdog.demo.runner import WIDTH, follow, say

LONG = ("12:00:01 INFO    watchdog.controller.remediator: remediation deleted: pod inference/wedge-7d9f engine "
        '{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} stalled: 21 requests running (0 waiting), '
        "progress signals unchanged (vllm:generation_tokens_total=1234, vllm:iteration_tokens_total_count=99) for "
        "6 s over 3 busy samples (window 5 s)")


def test_a_long_watchdog_line_is_wrapped_whole(capsys: pytest.CaptureFixture[str]) -> None:
    follow([LONG], time.monotonic(), verbose=False)
    out = capsys.readouterr().out.rstrip("\n").split("\n")
    assert len(out) > 1 and all(len(line) <= WIDTH for line in out)
    assert out[0].startswith("[") and "] watchdog | remediation deleted:" in out[0]
    indent = out[0].index("watchdog | ") + len("watchdog | ")
    assert all(line[:indent].strip() == "" and line[indent] != " " for line in out[1:])
    assert " ".join(line.strip() for line in out).split("watchdog | ", 1)[1] == LONG.split(": ", 1)[1]


def test_a_short_line_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    say(time.monotonic(), "Event    | Warning StalledPodDeleted on Pod/x")
    (line,) = capsys.readouterr().out.splitlines()
    assert line.endswith("] Event    | Warning StalledPodDeleted on Pod/x")
