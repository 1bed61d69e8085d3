"""The ``replay`` verb: CSV in, one JSON verdict per row out; bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict], str]:
    rc = main(["replay", *argv])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return str(p)


def test_bundled_seed_incident_stalls_after_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    rc, rows, err = run(capsys, "example:seed-incident")
    assert rc == 0 and err == ""
    assert len(rows) == 32
    assert set(rows[0]) == {"t", "state", "stalled", "stalled_for_s", "reason"}
    first_stall = next(r for r in rows if r["stalled"])
    # Counters last rose at t=240; the window is 120 s.
    assert first_stall["t"] == 360.0 and first_stall["stalled_for_s"] == 120.0
    assert "21 requests running" in first_stall["reason"]
    assert rows[21]["state"] == "unknown"  # the failed scrape in the middle of the wedge
    assert all(r["state"] == "progressing" for r in rows[1:17])


def test_window_and_min_samples_flags(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows, _ = run(capsys, "example:seed-incident", "--window", "60")
    assert next(r for r in rows if r["stalled"])["t"] == 300.0
    _, rows, _ = run(capsys, "example:seed-incident", "--window", "60", "--min-samples", "7")
    # 7 known busy samples from t=240 end at t=345: the unknown scrape at t=315 does not count.
    assert next(r for r in rows if r["stalled"])["t"] == 345.0


def test_optional_columns_empty_cells_and_extra_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = "t,running,generation_tokens,prompt_tokens,waiting,pod\n0,0,1,1,3,a\n15,,,,,a\n30,0,1,1,3,a\n"
    rc, rows, err = run(capsys, write(tmp_path, trace), "--count-waiting", "--window", "15", "--min-samples", "1")
    assert rc == 0
    assert [r["state"] for r in rows] == ["suspect", "unknown", "stalled"]
    assert "ignoring column(s) pod" in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("t,generation_tokens\n1,3\n", "trace.csv:1: missing column(s) running"),
        ("t,running,waiting\n1,2,3\n", "trace.csv:1: no progress column"),
        ("t,running,generation_tokens,prompt_tokens\n0,1,2,3\n15,1,x,3\n",
         "trace.csv:3, column 'generation_tokens': 'x' is not a number"),
        ("t,running,generation_tokens,prompt_tokens\n0,1,2\n", "trace.csv:2: 3 cells, header has 4"),
        ("t,running,generation_tokens,prompt_tokens\n,1,2,3\n", "trace.csv:2, column 't'"),
        ("", "empty file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    rc, rows, err = run(capsys, write(tmp_path, text))
    assert rc == 2 and rows == []
    assert message in err and len(err.strip().splitlines()) == 1


def test_unreadable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run(capsys, str(tmp_path / "missing.csv"))
    assert rc == 2 and "missing.csv: cannot read: No such file or directory" in err


@pytest.mark.e2e  # a `watchdog` process of its own
def test_bad_flag_value_exits_2_without_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "watchdog", "replay", "example:seed-incident", "--window", "-5"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "must be > 0 seconds" in proc.stderr


@pytest.mark.e2e  # a `watchdog` process of its own
def test_stdin_and_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "watchdog", "replay", "-"], capture_output=True, text=True,
                          input="t,running,generation_tokens,prompt_tokens\n0,0,1,1\n")
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == "idle"
    helptext = subprocess.run([sys.executable, "-m", "watchdog", "replay", "--help"], capture_output=True,
                              text=True).stdout
    for word in ("required columns", "empty cell", "heartbeat", "example:seed-incident", "Exit status"):
        assert word in helptext


@pytest.mark.e2e  # a `watchdog` process of its own
def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    # `true` exits without reading: replay's writes hit a closed pipe (EPIPE) every time.
    proc = subprocess.run(f"{sys.executable} -m watchdog replay example:seed-incident | true", shell=True,
                          capture_output=True, text=True, executable="/bin/bash")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert proc.stderr == ""


def test_excel_bom_duplicate_columns_header_only_and_time_going_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbft,running,generation_tokens,prompt_tokens\n10,1,1,1\n5,1,1,1\n")
    rc, rows, err = run(capsys, str(p))
    assert rc == 0 and [r["t"] for r in rows] == [10.0, 5.0]
    assert "line 3: t goes backwards" in err
    rc, rows, err = run(capsys, write(tmp_path, "t,t,running,generation_tokens,prompt_tokens\n"))
    assert rc == 2 and "column(s) t appear more than once" in err
    rc, rows, err = run(capsys, write(tmp_path, "t,running,generation_tokens,prompt_tokens\n"))
    assert rc == 0 and rows == [] and "has a header but no rows" in err


HEADER = b"t,running,generation_tokens,prompt_tokens"


@pytest.mark.parametrize(("newline", "bom"), [(b"\n", b""), (b"\r\n", b""), (b"\r", b""), (b"\n", b"\xef\xbb\xbf")])
def test_a_byte_that_is_not_utf8_is_reported_on_its_own_line_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], newline: bytes, bom: bytes) -> None:
    # 500 good rows (lines 2-501), then a Latin-1 byte inside the 8th character of line 502: far past the
    # text decoder's first 8 KiB chunk, where the error used to be reported as line 1.
    rows = [HEADER, *(f"{i},1,{i},{i}".encode() for i in range(500)), b"500,1,5\xe90,500", b"501,1,1,1"]
    p = tmp_path / "latin1.csv"
    p.write_bytes(bom + newline.join(rows) + newline)
    rc, out, err = run(capsys, str(p))
    assert rc == 2 and out == []
    assert err.strip() == (f"vllm-watchdog replay: {p}:502, column 8: byte 0xe9 is not UTF-8 (invalid continuation "
                           "byte); save the trace as UTF-8 text")


@pytest.mark.e2e  # a `watchdog` process of its own
def test_a_bad_byte_on_the_first_line_and_on_stdin() -> None:
    proc = subprocess.run([sys.executable, "-m", "watchdog", "replay", "-"], capture_output=True,
                          input=b"t,running,generation_tokens,prompt_tokens\n0,0,1,1\n15,\xff,1,1\n")
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"<stdin>:3, column 4: byte 0xff is not UTF-8 (invalid start byte)" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "watchdog", "replay", "-"], capture_output=True,
                          input=b"\xef\xbb\xbft\xc3,running\n")
    assert b"<stdin>:1, column 2: byte 0xc3 is not UTF-8" in proc.stderr


def test_utf8_text_around_the_rows_is_still_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "utf8.csv"
    p.write_bytes("t,running,generation_tokens,prompt_tokens,note\r\n0,0,1,1,café\r\n15,0,1,1,🙂\r\n".encode())
    rc, rows, err = run(capsys, str(p))
    assert rc == 0 and [r["state"] for r in rows] == ["idle", "idle"] and "ignoring column(s) note" in err
