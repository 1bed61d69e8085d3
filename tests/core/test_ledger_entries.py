"""The deletion ledger's pure part: encoding, trimming, bounds, and the same budget arithmetic as Events."""

from __future__ import annotations

import json

import pytest

from watchdog.config.settings import BY_NAME
from watchdog.core.ledger import DATA_KEY, MAX_ENTRIES, MAX_TEXT, LedgerEntry, LedgerFull, add, deletions, parse, render

W = 600.0


def test_round_trip_and_trim_to_the_window() -> None:
    entries = [LedgerEntry(1000.0, "a", "p1", "u1"), LedgerEntry(1500.0, "b", "p2", "u2")]
    assert parse(render(entries)) == (entries, None)
    kept = add(entries, LedgerEntry(1700.0, "a", "p3", "u3"), wall_now=1700.0, window_s=W)
    assert [e.uid for e in kept] == ["u2", "u3"]  # u1 is 700 s old: out of the 600 s window


def test_the_same_pod_is_recorded_once() -> None:
    entries = [LedgerEntry(float(i), "a", f"p{i}", f"u{i}") for i in range(3)]
    again = add(entries, LedgerEntry(10.0, "a", "p", "u2"), wall_now=10.0, window_s=1e9)
    assert [e.uid for e in again] == ["u0", "u1", "u2"] and again[-1].t == 10.0


def test_every_entry_the_budget_can_need_is_kept() -> None:
    """Issue 36 item 7: the ledger kept 256 entries while maxDeletions accepted 10,000; 300 removals inside the
    window were read back as 256. Now maxDeletions is bounded by MAX_ENTRIES and nothing inside the window is cut."""
    assert BY_NAME["max_deletions"].maximum == MAX_ENTRIES == BY_NAME["max_deletions_per_namespace"].maximum
    entries: list[LedgerEntry] = []
    for i in range(MAX_ENTRIES):
        entries = add(entries, LedgerEntry(float(i), "a", f"p{i}", f"u{i}"), wall_now=float(i), window_s=1e9)
    assert len(entries) == MAX_ENTRIES and parse(render(entries)) == (entries, None)


def test_an_entry_inside_the_window_is_never_cut_silently() -> None:
    entries = [LedgerEntry(float(i), "a", f"p{i}", f"u{i}") for i in range(MAX_ENTRIES)]
    with pytest.raises(LedgerFull, match=f"already holds {MAX_ENTRIES} removals inside the 1e\\+09 s window"):
        add(entries, LedgerEntry(1e4, "a", "p", "new"), wall_now=1e4, window_s=1e9)
    kept = add(entries, LedgerEntry(1e4, "a", "p", "new"), wall_now=1e4, window_s=1e4 - 0.5)  # u0 is out of the window
    assert len(kept) == MAX_ENTRIES and kept[0].uid == "u1" and kept[-1].uid == "new"


def test_a_full_ledger_of_the_longest_names_fits_the_parse_bound() -> None:
    """The capacity is what the ConfigMap can hold: MAX_ENTRIES entries of the longest namespace (63), pod name
    (253) and UID (36) render within MAX_TEXT (512 KiB, half the API server's 1 MiB object limit)."""
    longest = [LedgerEntry(1_800_000_000.123 + i, "n" * 63, "p" * 253, f"{i:036d}") for i in range(MAX_ENTRIES)]
    text = render(longest)[DATA_KEY]
    assert len(text) <= MAX_TEXT and parse(render(longest)) == (longest, None)


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
    entries = [LedgerEntry(9_000.0, "a", "p1", "u1"), LedgerEntry(9_900.0, "b", "p2", "u2"),
               LedgerEntry(9_950.0, "c", "p3", "u3")]
    got = deletions(entries, now=50.0, wall_now=10_000.0, window_s=W)
    assert got == [(-50.0, "b", "u2"), (0.0, "c", "u3")]  # u1 is 1,000 s old
    assert json.loads(render(entries)[DATA_KEY])[0] == {"t": 9000.0, "namespace": "a", "pod": "p1", "uid": "u1"}


def test_an_entry_counts_from_the_latest_its_removal_can_have_been_applied() -> None:
    """An entry is stamped before its ledger PUT and its DELETE (each within apiTimeoutSeconds): it counts from
    ``sent_within_s`` after its stamp, so a slow DELETE can never free its slot early (sim seed 6417: a DELETE
    applied 6 s after its stamp let a third removal in 144 s of a 150 s window after a failover)."""
    entries = [LedgerEntry(9_400.0, "a", "p1", "u1")]  # W = 600: exactly one window old at wall 10,000
    assert deletions(entries, now=50.0, wall_now=10_000.0, window_s=W) == []
    assert deletions(entries, now=50.0, wall_now=10_000.0, window_s=W, sent_within_s=20.0) == [(-530.0, "a", "u1")]
    assert deletions(entries, now=50.0, wall_now=10_020.0, window_s=W, sent_within_s=20.0) == []
