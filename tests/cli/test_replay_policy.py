"""``replay --config FILE --target NAME``: the trace judged with that target's effective policy (issue 30 item 1
done-when: two targets, windows 60 s and 600 s, give different verdicts on the same recorded incident)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from watchdog.cli.main import main

INCIDENTS = Path(__file__).parents[1] / "fixtures" / "incidents"
CONFIG = """\
targets:
  - {name: chat-8b, podSelector: app=chat, windowSeconds: 60}
  - {name: big-405b, podSelector: app=big, windowSeconds: 600, minSamples: 5}
"""


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["replay", *argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return str(path)


@pytest.mark.parametrize("source", [["example:seed-incident"],
                                    ["--expositions", str(INCIDENTS / "vllm-seed-incident")]])
def test_two_targets_judge_the_same_incident_differently(capsys: pytest.CaptureFixture[str], config: str,
                                                         source: list[str]) -> None:
    code, fast, err = replay(capsys, *source, "--config", config, "--target", "chat-8b")
    assert code == 0 and "target chat-8b of" in err and "window 60 s (target), min samples 3" in err
    code, slow, err = replay(capsys, *source, "--config", config, "--target", "big-405b")
    assert code == 0 and "window 600 s (target), min samples 5, action delete" in err
    assert fast[-1]["state"] == "stalled" and "(window 60 s)" in fast[-1]["reason"]
    assert slow[-1]["state"] == "suspect" and "(window 600 s)" in slow[-1]["reason"]
    assert not any(row["stalled"] for row in slow)


def test_a_flag_given_with_config_wins_and_is_said(capsys: pytest.CaptureFixture[str], config: str) -> None:
    code, rows, err = replay(capsys, "example:seed-incident", "--config", config, "--target", "big-405b",
                             "--window", "60")
    assert code == 0 and "(--window given: the flag wins)" in err and rows[-1]["state"] == "stalled"


def test_a_bad_target_or_config_is_one_line(capsys: pytest.CaptureFixture[str], config: str) -> None:
    code, _, err = replay(capsys, "example:seed-incident", "--config", config)
    assert code == 2 and "has 2 targets: pick one with --target (chat-8b, big-405b)" in err
    code, _, err = replay(capsys, "example:seed-incident", "--config", config, "--target", "nope")
    assert code == 2 and "no target 'nope'" in err and len(err.splitlines()) == 1
