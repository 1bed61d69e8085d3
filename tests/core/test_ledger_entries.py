"""The deletion ledger's pure part: encoding, trimming, bounds, and the same budget arithmetic as Events."""

from __future__ import annotations

import json

import pytest

from watchdog.core.ledger import DATA_KEY, MAX_ENTRIES, Entry, add, deletions, parse, render

W = 600.0


def test_round_trip_and_trim_to_the_window() -> None:
    entries = [Entry(1000.0, "a", "p1", "u1"), Entry(1500.0, "b", "p2", "u2")]
    assert parse(render(entries)) == (entries, None)
    kept = add(entries, Entry(1700.0, "a", "p3", "u3"), wall_now=1700.0, window_s=W)
    assert [e.uid for e in kept] == ["u2", "u3"]  # u1 is 700 s old: out of the 600 s window


def test_the_same_pod_is_recorded_once_and_the_size_is_bounded() -> None:
    entries: list[Entry] = []
    for i in range(MAX_ENTRIES + 50):
        entries = add(entries, Entry(float(i), "a", f"p{i}", f"u{i}"), wall_now=float(i), window_s=1e9)
    assert len(entries) == MAX_ENTRIES and entries[-1].uid == f"u{MAX_ENTRIES + 49}"
    again = add(entries, Entry(1e6, "a", "p", entries[-1].uid), wall_now=1e6, window_s=1e9)
    assert [e.uid for e in again].count(entries[-1].uid) == 1


@pytest.mark.parametrize("data", [
    {DATA_KEY: "not json"}, {DATA_KEY: "{}"}, {DATA_KEY: "[1]"}, {DATA_KEY: '[{"t": "x"}]'},
    {DATA_KEY: '[{"t": true}]'}, {DATA_KEY: "[" + "1," * 400_000 + "1]"}, {DATA_KEY: 7},
])
def test_a_corrupt_ledger_is_reported_unusable(data: dict[str, object]) -> None:
    entries, problem = parse(data)
    assert entries == [] and problem is not None


def test_missing_data_is_an_empty_ledger() -> None:
    assert parse(None) == ([], None) and parse({}) == ([], None)


def test_deletions_use_the_window_whatever_namespace_they_name() -> None:
    """Every entry of the release's own ledger counts (fresh-eyes finding: a namespace opted out and in again
    across a restart freed the cluster budget)."""
    entries = [Entry(9_000.0, "a", "p1", "u1"), Entry(9_900.0, "b", "p2", "u2"), Entry(9_950.0, "c", "p3", "u3")]
    got = deletions(entries, now=50.0, wall_now=10_000.0, window_s=W)
    assert got == [(-50.0, "b", "u2"), (0.0, "c", "u3")]  # u1 is 1,000 s old
    assert json.loads(render(entries)[DATA_KEY])[0] == {"t": 9000.0, "namespace": "a", "pod": "p1", "uid": "u1"}
