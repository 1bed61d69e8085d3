"""tests/chart/values_schema.py: the decimal-string pattern holds exactly the bounds it is made from (the schema's
only way to bound ``helm --set k=2.5``), and a setting's property is its table row."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from values_schema import (
    DEFAULT_PATH,
    chart_schema,
    decimal_pattern,
    selector_pattern,
    setting_schema,
    target_setting_schema,
)

from watchdog.config.selectors import selector_problem
from watchdog.config.settings import BY_NAME, SETTINGS, TARGET_POLICY

TABLE_BOUNDS = sorted({(s.minimum, s.maximum) for s in SETTINGS if s.type == "float"
                       if s.minimum is not None and s.maximum is not None})
BOUNDS = [*TABLE_BOUNDS, (0.0, 0.0), (0.5, 0.5), (0.05, 0.25), (1.25, 3.75), (0.0, 0.001), (99.0, 100.0),
          (10.0, 10.5), (3.0, 1000.001), (0.0, 99999.0), (100.0, 100000.0)]
DECIMALS = st.builds(lambda zeros, whole, frac: "0" * zeros + str(whole) + (f".{frac}" if frac is not None else ""),
                     st.integers(0, 2), st.integers(0, 200_000) | st.sampled_from([0, 1, 60, 300, 86400]),
                     st.none() | st.text("0123456789", min_size=1, max_size=5))


def exact(x: float) -> Decimal:
    return Decimal(repr(float(x)))


@pytest.mark.parametrize(("low", "high"), BOUNDS)
@given(text=DECIMALS)
@example(text="86400.0000")
@example(text="86400.00001")
@example(text="0.05")
@example(text="0.0499")
def test_the_pattern_matches_exactly_the_decimals_within_the_bounds(low: float, high: float, text: str) -> None:
    assert bool(re.fullmatch(decimal_pattern(low, high), text)) == (exact(low) <= Decimal(text) <= exact(high))


@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_the_bounds_themselves_match(low: float, high: float) -> None:
    for bound in (low, high):
        text = format(exact(bound), "f")
        assert re.fullmatch(decimal_pattern(low, high), text), text
        assert re.fullmatch(decimal_pattern(low, high), f"00{text}{'' if '.' in text else '.'}000"), text


def test_the_pattern_is_re2_safe() -> None:
    """Go's regexp (helm's validator) has no look-around and no back-references."""
    for low, high in BOUNDS:
        assert not re.search(r"\(\?[=!<]|\\[1-9]", decimal_pattern(low, high))


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="minimum <= maximum"):
        decimal_pattern(2, 1)


def test_a_property_is_its_row() -> None:
    window = setting_schema(BY_NAME["window_seconds"])
    assert window["type"] == ["number", "string"] and (window["minimum"], window["maximum"]) == (1, 86400)
    assert window["default"] == BY_NAME["window_seconds"].default and window["description"]
    assert setting_schema(BY_NAME["min_pod_age_seconds"])["type"] == ["number", "string", "null"]
    assert setting_schema(BY_NAME["grace_period_seconds"])["type"] == ["integer", "null"]
    assert setting_schema(BY_NAME["action"])["enum"] == ["delete", "evict", "quarantine"]


def test_generating_keeps_the_charts_own_parts() -> None:
    """Only generated nodes change: a hand-written part (image) survives, a generated one is rewritten."""
    current = json.loads(DEFAULT_PATH.read_text())
    current["properties"]["image"]["properties"]["tag"]["maxLength"] = 128
    current["properties"]["config"]["properties"]["windowSeconds"]["maximum"] = 3600
    out = chart_schema(current)
    assert out["properties"]["image"]["properties"]["tag"]["maxLength"] == 128
    assert out["properties"]["config"]["properties"]["windowSeconds"]["maximum"] == 86400


def test_the_chart_schema_of_a_target_key_is_its_rows_without_a_default() -> None:
    for name in TARGET_POLICY:
        node = target_setting_schema(BY_NAME[name])
        assert "default" not in node
        for bound in ("minimum", "maximum"):
            assert node.get(bound) == (None if getattr(BY_NAME[name], bound) is None else
                                       pytest.approx(getattr(BY_NAME[name], bound)))


def test_the_chart_schema_of_the_target_keys_is_generated_from_the_rows() -> None:
    current = json.loads(DEFAULT_PATH.read_text())
    item = current["properties"]["config"]["properties"]["targets"]["items"]["properties"]
    for name in TARGET_POLICY:
        item.pop(BY_NAME[name].key)  # generated, never hand-written: put back from the rows
    again = chart_schema(current)["properties"]["config"]["properties"]["targets"]["items"]["properties"]
    assert {k: again[k] for k in (BY_NAME[n].key for n in TARGET_POLICY)} == {
        BY_NAME[n].key: target_setting_schema(BY_NAME[n]) for n in TARGET_POLICY}


SELECTOR_TOKENS = st.sampled_from(["app", "a.b/c", "Ex.com/x", "k8s.io/-", "v-1", "_x", "in", "notin", "=", "==",
                                   "!=", "!", ",", "(", ")", "<", " ", "  ", "\t", "a" * 64, "x/y/z", "UP/a", "",
                                   "\xa0", "\x1c", "\u2003"])  # white space Python's \s takes and the chart not


@given(text=st.lists(SELECTOR_TOKENS, max_size=9).map("".join) | st.lists(SELECTOR_TOKENS, max_size=9).map(" ".join))
@example(text="app in (a,b")
@example(text="app in (a,,b)")
@example(text="app in (,)")
@example(text="app in ()")
@example(text="appin (a)")
@example(text="!app,x!=,y==z")
def test_the_charts_selector_pattern_is_the_watchdogs_grammar(text: str) -> None:
    """The chart refuses (templates/_rules.tpl, regexMatch) exactly the label selectors the watchdog refuses."""
    assert bool(re.fullmatch(selector_pattern(), text)) == (selector_problem(text) is None), selector_problem(text)
