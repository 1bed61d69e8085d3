"""read_trace's refusals that the replay CLI tests do not reach, word for word (issue 28 item 6: the function was
split up; every message must read as before)."""

from __future__ import annotations

import io

import pytest

from watchdog.core.trace import TraceError, read_trace


def _bytes(data: bytes) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")


def test_an_unreadable_header_is_refused_on_line_1() -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(io.StringIO("t,running," + "x" * 200_000 + "\n"), "big.csv")
    assert str(caught.value) == "big.csv:1: unreadable CSV: field larger than field limit (131072)"


def test_a_header_that_is_not_utf8_is_refused_on_line_1() -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(_bytes(b"t,running,\xff\n"), "bad.csv")
    assert str(caught.value).startswith("bad.csv:1: unreadable CSV: 'utf-8' codec can't decode byte 0xff")


def test_an_unreadable_row_is_refused_with_its_line() -> None:
    text = "t,running,heartbeat\n0,1,1\n1,1," + "9" * 200_000 + "\n"
    with pytest.raises(TraceError) as caught:
        read_trace(io.StringIO(text), "big.csv")
    assert str(caught.value) == "big.csv:3: unreadable CSV: field larger than field limit (131072)"


def test_a_row_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(_bytes(b"t,running,heartbeat\n0,1,1\n1,1,\xff\n"), "bad.csv")
    assert "unreadable CSV: 'utf-8' codec can't decode byte 0xff" in str(caught.value)


def test_blank_rows_are_skipped_and_lines_keep_their_numbers() -> None:
    trace = read_trace(io.StringIO("t,running,heartbeat\n\n , ,\n5,1,1\n\n3,1,2\n"), "t.csv")
    assert [s.t for s in trace.samples] == [5.0, 3.0]
    assert trace.backwards_lines == [6]


@pytest.mark.parametrize(("text", "message"), [
    ("", "t.csv: empty file, expected a header row with t, running"),
    ("t,running,t\n", "t.csv:1: column(s) t appear more than once"),
    ("t,heartbeat\n", "t.csv:1: missing column(s) running (header is t,heartbeat)"),
    ("t,running,waiting\n", "t.csv:1: no progress column (one of generation_tokens, prompt_tokens, heartbeat, "
                            "kv_cache_usage or progress_<name>; header is t,running,waiting)"),
    ("t,running,heartbeat\n1,2\n", "t.csv:2: 2 cells, header has 3"),
    ("t,running,heartbeat\n1,x,2\n", "t.csv:2, column 'running': 'x' is not a number"),
    ("t,running,heartbeat\n,1,2\n", "t.csv:2, column 't': a finite time in seconds is required"),
    ("t,running,heartbeat\ninf,1,2\n", "t.csv:2, column 't': a finite time in seconds is required"),
])
def test_each_refusal_reads_word_for_word(text: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(io.StringIO(text), "t.csv")
    assert str(caught.value) == message


def test_columns_signals_and_ignored() -> None:
    trace = read_trace(io.StringIO("\ufefft ,paused,note,running,kv_cache_usage,progress_x\n1,0,hi,2,0.5,\n"), "t.csv")
    assert [(s.metric, s.kind) for s in trace.signals] == [("kv_cache_usage", "gauge"), ("progress_x", "counter")]
    assert trace.ignored_columns == ["note"]
    sample = trace.samples[0]
    assert (sample.t, sample.running, sample.progress, sample.waiting, sample.paused) == (1.0, 2.0, (0.5, None),
                                                                                         None, 0.0)
