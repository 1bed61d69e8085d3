"""Issue 11 items 16 and 19: bad verb flags are refused by argparse (exit 2, one line), never a traceback or a
FAIL summary that hides the reason."""

from __future__ import annotations

import argparse
import json

import pytest

from watchdog.cli.argtypes import MAX_SECONDS, non_negative_seconds, positive_int, positive_seconds, seconds_between
from watchdog.cli.main import main


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("value", ["1e300", "86401", "inf", "nan", "0", "-1"])
def test_check_deadline_out_of_range_is_one_line_exit_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["check", "--deadline", value, "-"], capsys)
    assert line.startswith("vllm-watchdog check: error: argument --deadline: ") and repr(value) in line


@pytest.mark.parametrize(("flag", "value", "needle"), [
    ("--window", "0", "must be >= 3 seconds"), ("--window", "nan", "not a finite number"),
    ("--window", "2.9", "must be >= 3 seconds"), ("--window", "1e300", "at most 3600"),
    ("--timeout", "-1", "must be > 0 seconds"), ("--timeout", "0", "must be > 0 seconds"),
    ("--timeout", "inf", "not a finite number"), ("--wedge-after", "-1", "must be >= 0 seconds"),
    ("--wedge-after", "nan", "not a finite number"), ("--timeout", "soon", "not a number of seconds"),
])
def test_demo_flags_are_validated(flag: str, value: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["demo", flag, value], capsys)
    assert line.startswith(f"vllm-watchdog demo: error: argument {flag}: ") and needle in line


def test_argtypes_bounds() -> None:
    assert positive_seconds("86400") == MAX_SECONDS
    assert non_negative_seconds("0") == 0.0
    assert seconds_between(3.0, 10.0, low_inclusive=True)("3") == 3.0
    assert positive_int("7") == 7
    for parse, text in [(positive_seconds, "86400.5"), (non_negative_seconds, "-0.1"), (positive_int, "9" * 5000),
                        (positive_int, "0"), (positive_int, str(2 ** 41))]:
        with pytest.raises(argparse.ArgumentTypeError) as err:
            parse(text)
        assert len(str(err.value)) < 120


@pytest.mark.parametrize(("argv", "needle"), [
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["run", "--config"], "argument --config: expected one argument"),
    (["run", "--once", "--dry-run=maybe"], "--dry-run"),
])
def test_a_refused_run_command_line_is_its_one_json_fatal_line(argv: list[str], needle: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30 item 6: a bad extraArgs flag of the chart's Deployment shows in kubectl logs as run's other fatal
    start-up errors do (one JSON object, reason "usage"), not as argparse's usage text."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    record = json.loads(err[0])
    assert (record["level"], record["reason"]) == ("error", "usage") and needle in record["msg"]


def test_a_refused_run_command_line_follows_the_log_format_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--log-format", "text", "--bogus"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "ERROR" in line and "command line refused: unrecognized arguments: --bogus" in line
    assert not line.startswith("{")


def test_no_parser_takes_an_abbreviation(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 39 item 11: `run --dry` or `--window 300` (an extraArgs typo that is a prefix of a flag) is refused, not
    read as --dry-run or --window-seconds: every verb's every long flag, shortened by one character."""
    from watchdog.cli.main import _build_parser

    verbs = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    tried = 0
    for verb, parser in verbs.choices.items():
        assert parser.allow_abbrev is False, verb
        for action in parser._actions:
            for flag in action.option_strings:
                if not flag.startswith("--") or len(flag) < 5 or flag == "--help":
                    continue
                ns_or_error: object
                try:
                    ns_or_error = parser.parse_known_args([flag[:-1], "1"])
                except Exception as exc:  # _Parser raises UsageError for what argparse refuses
                    ns_or_error = exc
                assert not isinstance(ns_or_error, tuple) or flag[:-1] in ns_or_error[1], (verb, flag)
                tried += 1
    assert tried > 50
    main_said = refused(["status", "--form", "json"], capsys)
    assert main_said == "vllm-watchdog: error: unrecognized arguments: --form json"
