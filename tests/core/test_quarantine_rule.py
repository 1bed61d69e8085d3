"""The pure quarantine rule: what a gated pod's readiness gate condition should be, and the rails on draining."""

from __future__ import annotations

from typing import Any

import pytest
from builders import quarantine_rails

from watchdog.core.quarantine import (
    GATE_CONDITION,
    OwnerShare,
    QuarantineRails,
    change_for,
    drain_hold,
    gate_condition,
    read_fleet,
    wanted,
)

OWNER = "ns/ReplicaSet/engine-7d9"


def pod(uid: str, *, ready: bool = True, gate: str | None = "True", gated: bool = True, owner: str = "engine-7d9",
        terminating: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if gate is not None:
        conditions.append({"type": GATE_CONDITION, "status": gate})
    meta: dict[str, Any] = {"uid": uid, "namespace": "ns", "name": uid, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": "rs", "controller": True}]}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"readinessGates": [{"conditionType": GATE_CONDITION}]} if gated else {}
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions}}


@pytest.mark.parametrize(("states", "want"), [
    ([("stalled", 130.0)], "drain"),
    ([("suspect", 60.0)], "drain"),  # suspect for quarantineAfterSeconds
    ([("suspect", 59.0)], "hold"),  # suspect, not long enough
    ([("suspect", 59.5)], "drain"),  # within the detector's slack for scheduled samples (1%: 0.6 s)
    ([("suspect", 59.3)], "hold"),  # beyond it
    ([("unknown", 0.0)], "hold"),  # a failed scrape is never evidence: neither drains nor releases
    ([], "hold"),  # no engine series known
    ([("progressing", 0.0), ("unknown", 0.0)], "hold"),  # a mixed pod is not released
    ([("progressing", 0.0), ("idle", 0.0), ("paused", 0.0)], "release"),
    ([("progressing", 0.0), ("stalled", 200.0)], "drain"),  # one wedged engine is enough
])
def test_what_the_engines_ask_for(states: list[tuple[str, float]], want: str) -> None:
    assert wanted(states, 60.0) == want


@pytest.mark.parametrize(("want", "condition", "change"), [
    ("release", None, "admitted"),  # a new gated pod whose engine is fine: Ready without waiting a window
    ("release", "False", "released"),
    ("release", "True", None),
    ("drain", "True", "quarantined"),
    ("drain", "False", None),
    ("drain", None, None),  # never admitted: not Ready anyway, nothing to drain
    ("hold", "True", None),
    ("hold", "False", None),  # unknown keeps a quarantined pod quarantined
    ("hold", None, None),
])
def test_the_write_that_follows(want: Any, condition: str | None, change: str | None) -> None:
    assert change_for(want, condition) == change


def test_the_fleet_view_counts_owners_once_and_skips_terminating_pods() -> None:
    pods = [pod("a"), pod("b", ready=False, gate="False"), pod("c", gated=False), pod("a"),
            pod("d", terminating=True), pod("e", owner="other", gate=None, ready=False)]
    fleet = read_fleet(pods)
    assert sorted(fleet.gated) == ["a", "b", "e"]
    assert fleet.gated["b"].condition == "False" and fleet.gated["e"].condition is None
    assert fleet.gated["a"].owner_key == OWNER and fleet.gated["a"].ready
    assert fleet.owner_pods == {OWNER: 3, "ns/ReplicaSet/other": 1}
    assert fleet.owner_ready == {OWNER: 2, "ns/ReplicaSet/other": 0}


def test_owner_share_rounds_down_and_counts_drains_of_this_cycle() -> None:
    fleet = read_fleet([pod(u) for u in "abcd"])
    share = OwnerShare(fleet, 0.5, {})
    assert share.hold(OWNER, True) is None
    share.drain(OWNER, True)
    assert share.hold(OWNER, True) is None
    share.drain(OWNER, True)
    held = share.hold(OWNER, True)
    assert held is not None and held.rule == "owner_share"
    assert held.why == f"{OWNER} has 2 of its 4 pods drained; at most 2 (0.5 of them) may be"
    three = OwnerShare(read_fleet([pod(u) for u in "abc"]), 0.5, {})
    assert three.hold(OWNER, True) is None  # int(1.5) = 1 may be drained ...
    three.drain(OWNER, True)
    assert (held := three.hold(OWNER, True)) is not None and held.rule == "owner_share"  # ... not 2


def test_never_the_last_ready_pod() -> None:
    fleet = read_fleet([pod("a"), pod("b", ready=False, gate=None)])
    held = OwnerShare(fleet, 1.0, {}).hold(OWNER, True)
    assert held is not None and held.rule == "last_ready"
    assert held.why == f"it is the last Ready pod of {OWNER}"
    assert OwnerShare(fleet, 1.0, {}).hold(None, True) == OwnerShare(fleet, 1.0, {}).hold(None, False)
    assert OwnerShare(fleet, 1.0, {}).hold(None, True).rule == "last_ready"  # type: ignore[union-attr]


def test_a_drained_pod_the_listing_still_shows_ready_is_not_counted_ready() -> None:
    fleet = read_fleet([pod("a"), pod("b")])  # b was drained since this (cached) listing was served
    share = OwnerShare(fleet, 1.0, {"b": OWNER})
    held = share.hold(OWNER, True)
    assert held is not None and held.rule == "last_ready"


def test_one_pod_owner_is_never_drained_even_at_fraction_one() -> None:
    share = OwnerShare(read_fleet([pod("a")]), 1.0, {})
    held = share.hold(OWNER, True)
    assert held is not None and held.rule == "last_ready"


@pytest.mark.parametrize(("rails", "kw", "rule"), [
    (quarantine_rails(), {"namespace_mode": "dry-run"}, "dry_run"),
    (quarantine_rails(dry_run=True), {}, "dry_run"),
    (quarantine_rails(quarantine_in_dry_run=True), {"namespace_mode": "dry-run"}, None),
    (quarantine_rails(), {"paused_by": "paused: true"}, "paused"),
    (quarantine_rails(), {"breaker_open": True}, "breaker"),
    (quarantine_rails(), {"namespace_breaker_open": True}, "namespace_breaker"),
    (quarantine_rails(), {}, None),
])
def test_the_rails_before_the_owner_share(rails: QuarantineRails, kw: dict[str, Any], rule: str | None) -> None:
    args: dict[str, Any] = {"namespace_mode": "enforce", "paused_by": None, "breaker_open": False,
                            "namespace_breaker_open": False, **kw}
    held = drain_hold(rails, **args)
    assert (held.rule if held else None) == rule


def test_the_condition_written() -> None:
    assert gate_condition("quarantined", "x" * 2000, "2026-01-01T00:00:00Z") == {
        "type": GATE_CONDITION, "status": "False", "reason": "EngineStalled", "message": "x" * 1024,
        "lastTransitionTime": "2026-01-01T00:00:00Z"}
    assert gate_condition("admitted", "ok", "t")["status"] == "True"
    assert gate_condition("released", "ok", "t")["reason"] == "EngineProgressing"
