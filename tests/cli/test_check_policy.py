"""``check --config FILE --target NAME`` (issue 30 item 1): the target's profile and its effective policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.cli.main import main

CONFIG = """\
targets:
  - name: chat
    podSelector: app=chat
    windowSeconds: 60
  - name: big
    podSelector: app=big
    profile: sglang
    windowSeconds: 600
    action: evict
"""
BODY = 'sglang:num_running_reqs{engine="0"} 3\nvllm:num_requests_running{engine="0",model_name="m"} 3\n'


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "m.prom").write_text(BODY)
    return tmp_path / "config.yaml", tmp_path / "m.prom"


def test_check_prints_the_targets_effective_policy_and_reads_with_its_profile(
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, body = files
    assert main(["check", "--config", str(config), "--target", "big", str(body)]) == 0
    out, err = capsys.readouterr()
    assert "profile: sglang" in out
    assert (f"note: target big of {config}: window 600 s (target), min samples 3, action evict, completion-only "
            "window off") in err
    assert main(["check", "--config", str(config), "--target", "chat", str(body)]) == 0
    out, err = capsys.readouterr()
    assert "profile: vllm" in out and "window 60 s (target), min samples 3, action delete" in err


@pytest.mark.parametrize(("extra", "needle"), [
    ([], "has 2 targets: pick one with --target (chat, big)"),
    (["--target", "nope"], "no target 'nope' (targets: chat, big)"),
    (["--target", "big", "--profile", "vllm"], "give either --profile or --config, not both"),
])
def test_a_bad_config_target_is_one_line_exit_2(files: tuple[Path, Path], extra: list[str], needle: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config, body = files
    assert main(["check", "--config", str(config), *extra, str(body)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert needle in line


def test_target_without_config_is_refused(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--target", "big", str(files[1])]) == 2
    assert "--target needs --config FILE" in capsys.readouterr().err
