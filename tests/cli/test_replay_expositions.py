"""replay --expositions: recorded /metrics bodies of each engine's real cases through the path `run` uses."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from watchdog.cli.main import main

INCIDENTS = Path(__file__).parents[1] / "fixtures" / "incidents"


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["replay", *argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def states(rows: list[dict[str, Any]], **labels: str) -> dict[float, str]:
    return {r["t"]: r["state"] for r in rows if all(r["series"].get(k) == v for k, v in labels.items())}


def test_the_fixtures_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("generate", INCIDENTS / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    for case, files in generate.bodies().items():
        on_disk = {p.name: p.read_text() for p in (INCIDENTS / case).glob("*.prom")}
        assert on_disk == files, f"{case}: run python tests/fixtures/incidents/generate.py"


def test_seed_incident_is_stalled_one_window_after_the_counters_froze(capsys: pytest.CaptureFixture[str]) -> None:
    code, rows, err = replay(capsys, "--expositions", str(INCIDENTS / "vllm-seed-incident"))
    assert (code, err) == (0, "")
    by_t = states(rows)
    assert len(by_t) == 21 and by_t[60.0] == "progressing"
    assert [by_t[t] for t in (75.0, 165.0)] == ["suspect", "suspect"]
    assert all(by_t[t] == "stalled" for t in range(180, 301, 15))
    last = rows[-1]
    assert last["series"] == {"engine": "0", "model_name": "Qwen/Qwen3-8B"} and last["stalled_for_s"] == 240.0
    assert "vllm:generation_tokens_total=480789" in last["reason"]


def test_a_v1_long_chunked_prefill_is_never_stalled(capsys: pytest.CaptureFixture[str]) -> None:
    code, rows, _ = replay(capsys, "--expositions", str(INCIDENTS / "vllm-v1-long-prefill"), "--window", "45")
    assert code == 0 and not any(r["stalled"] for r in rows)
    assert {r["reason"] for r in rows[1:]} == {"progressing: 1 running, vllm:kv_cache_usage_perc moving"}


def test_a_sleeping_engine_is_paused_never_stalled(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows, _ = replay(capsys, "--expositions", str(INCIDENTS / "vllm-sleeping"), "--window", "45")
    assert set(states(rows).values()) == {"paused"}


def test_one_wedged_sglang_rank_is_stalled_and_the_other_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows, _ = replay(capsys, "--expositions", str(INCIDENTS / "sglang-dp2-rank-wedged"), "--profile", "sglang")
    assert len(rows) == 42  # two engine series per scrape: TP rank copies and the tokenizer's series join none
    assert set(states(rows, dp_rank="0").values()) <= {"suspect", "progressing"}
    rank1 = states(rows, dp_rank="1")
    assert rank1[165.0] == "suspect" and rank1[180.0] == "stalled" and rank1[300.0] == "stalled"


def test_one_long_sglang_generation_progresses_on_realtime_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows, _ = replay(capsys, "--expositions", str(INCIDENTS / "sglang-long-generation"), "--profile", "sglang",
                        "--window", "45")
    assert not any(r["stalled"] for r in rows)
    assert rows[-1]["reason"] == "progressing: 1 running, sglang:realtime_tokens_total moving"


def test_a_long_llamacpp_generation_progresses_on_n_decode_alone(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows, _ = replay(capsys, "--expositions", str(INCIDENTS / "llamacpp-long-generation"), "--profile",
                        "llamacpp", "--window", "45")
    assert not any(r["stalled"] for r in rows) and rows[-1]["series"] == {}
    assert rows[-1]["reason"] == "progressing: 1 running, llamacpp:n_decode_total moving"


def test_trtllm_long_request_is_unknown_unless_the_completion_window_is_set(
        capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(INCIDENTS / "trtllm-long-request")
    _, rows, _ = replay(capsys, "--expositions", trace, "--profile", "trtllm")
    assert set(states(rows).values()) == {"unknown"}
    assert "only completion-only progress signals" in rows[-1]["reason"]
    _, rows, _ = replay(capsys, "--expositions", trace, "--profile", "trtllm", "--completion-only-window", "600")
    assert set(states(rows).values()) == {"suspect"}  # judged now, on the 600 s window the recording never spans
    assert rows[-1]["stalled_for_s"] == 300.0 and "window 600 s" in rows[-1]["reason"]


@pytest.mark.parametrize(("files", "message"), [
    ({"0.prom": "x 1\n", "notes.txt": "hi"}, "notes.txt: expected a file named <seconds>.prom"),
    ({"1.prom": "x 1\n", "1.0.prom": "x 1\n"}, "1.prom: same time as"),
    ({"-5.prom": "x 1\n"}, "-5.prom: expected a file named"),
    ({"0.prom": "x 1\n", "20.prom/": ""}, "20.prom: not a regular file"),
    ({}, "no <seconds>.prom files"),
])  # fmt: skip
def test_bad_directories_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 files: dict[str, str], message: str) -> None:
    for name, body in files.items():
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text(body)
    code, rows, err = replay(capsys, "--expositions", str(tmp_path))
    assert (code, rows) == (2, []) and message in err and len(err.strip().splitlines()) == 1


def test_files_are_read_in_numeric_order_and_a_bad_body_is_unknown(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    busy = 'vllm:num_requests_running{engine="0"} 2\nvllm:generation_tokens_total{engine="0"} %d\n'
    (tmp_path / "9.prom").write_text(busy % 1)
    (tmp_path / "10.5.prom").write_text(busy % 2)
    (tmp_path / "100.prom").write_text("vllm:num_requests_running{engine=\"0\"} 2\n" + "x 1\n" * 10)
    code, rows, err = replay(capsys, "--expositions", str(tmp_path))
    assert code == 0
    assert [(r["t"], r["state"]) for r in rows] == [(9.0, "suspect"), (10.5, "progressing"), (100.0, "unknown")]
    assert err == ""


def test_trace_and_expositions_exclude_each_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(capsys, "example:seed-incident", "--expositions", str(tmp_path))[0] == 2
    assert replay(capsys)[0] == 2
    code, _, err = replay(capsys, "example:seed-incident", "--profile", "sglang")
    assert code == 2 and "--profile applies to --expositions only" in err


def test_a_wrong_profile_exits_1_instead_of_looking_never_stalled(capsys: pytest.CaptureFixture[str]) -> None:
    code, rows, err = replay(capsys, "--expositions", str(INCIDENTS / "vllm-seed-incident"), "--profile", "sglang")
    assert (code, rows) == (1, [])
    assert err.splitlines()[-1].startswith("vllm-watchdog replay: no engine series of the sglang profile")


def test_a_nul_byte_is_read_as_run_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "0.prom").write_bytes(b'vllm:num_requests_running{engine="0"} 1\n\0\x00garbage\n'
                                      b'vllm:generation_tokens_total{engine="0"} 5\n')
    code, rows, _ = replay(capsys, "--expositions", str(tmp_path))
    assert code == 0 and [r["state"] for r in rows] == ["suspect"]


@pytest.mark.parametrize("window", ["60", "599", "640"])
def test_the_completion_only_window_follows_the_settings_rule(capsys: pytest.CaptureFixture[str],
                                                              window: str) -> None:
    code, _, err = replay(capsys, "--expositions", str(INCIDENTS / "trtllm-long-request"), "--profile", "trtllm",
                          "--completion-only-window", window, "--window", "650")
    assert code == 2 and "must be 0 (off) or at least 600 s and at least --window (650)" in err


def test_a_custom_profile_from_the_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "targets:\n"
        "  - {name: sg, podSelector: a=b, profile: sglang}\n"
        "  - {name: kv-only, podSelector: a=c, profile: vllm, metrics: {progress: [vllm:kv_cache_usage_perc]}}\n")
    trace = str(INCIDENTS / "vllm-v1-long-prefill")
    code, _, err = replay(capsys, "--expositions", trace, "--config", str(config))
    assert code == 2 and "has 2 targets: pick one with --target (sg, kv-only)" in err
    code, rows, _ = replay(capsys, "--expositions", trace, "--config", str(config), "--target", "kv-only",
                           "--window", "45")
    assert code == 0 and rows[-1]["reason"] == "progressing: 1 running, vllm:kv_cache_usage_perc moving"
    for argv, needle in ((["--target", "nope"], "no target 'nope' (targets: sg, kv-only)"),
                         (["--target", "sg", "--profile", "vllm"], "either --profile or --config")):
        code, _, err = replay(capsys, "--expositions", trace, "--config", str(config), *argv)
        assert code == 2 and needle in err and len(err.splitlines()) == 1
    config.write_text("windowSeconds: -1\n")
    code, _, err = replay(capsys, "--expositions", trace, "--config", str(config))
    assert code == 2 and "windowSeconds" in err and len(err.splitlines()) == 1
