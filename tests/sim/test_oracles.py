"""Each oracle fires on a hand-made violating history, and holds on the same history made right (tests/sim)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sim_api import Write
from sim_oracles import (
    Facts,
    PodFacts,
    accounted,
    budgets_held,
    ledger_ahead,
    live,
    owner_share_held,
    paused_held,
    removed_only_wedged,
    writes_fenced,
)

pytestmark = pytest.mark.sim
LEDGER_A = json.dumps({"deletions": json.dumps([{"t": 100.0, "namespace": "a", "pod": "pa", "uid": "A"}])})


def pod(uid: str, namespace: str = "a", owner: str = "a/rs", **kw: Any) -> PodFacts:
    return PodFacts(uid, namespace, "t", owner, created=0.0, ready_at=0.0, window=60.0, **kw)


def removal(t: float, uid: str, namespace: str = "a", replica: str = "r0", **detail: Any) -> Write:
    return Write(t, replica, "remove", uid, {"namespace": namespace, "ledger": [LEDGER_A], **detail})


def facts(writes: list[Write], pods: list[PodFacts], wedged: dict[str, float], **kw: Any) -> Facts:
    return Facts(writes=writes, pods={p.uid: p for p in pods},
                 wedged_since=lambda uid, t: wedged.get(uid) if wedged.get(uid, 1e9) <= t else None, **kw)


def test_removed_only_wedged_fires_on_a_pod_wedged_less_than_its_window() -> None:
    early = facts([removal(100.0, "A")], [pod("A")], {"A": 50.0})
    assert removed_only_wedged(early) == ["t=100 r0 removed pod a/A: wedged for 50 s only (window 60 s)"]
    assert removed_only_wedged(facts([removal(100.0, "A")], [pod("A")], {"A": 40.0})) == []
    assert "not wedged" in removed_only_wedged(facts([removal(100.0, "A")], [pod("A")], {}))[0]
    dry = facts([removal(100.0, "A")], [pod("A")], {"A": 0.0}, dry_run_namespaces=frozenset({"a"}))
    assert "dry-run namespace a" in removed_only_wedged(dry)[0]


def test_budgets_held_fires_past_max_deletions_and_the_namespace_budget() -> None:
    pods = [pod("A"), pod("B", "b"), pod("C", "c")]
    three = [removal(10.0, "A"), removal(20.0, "B", "b"), removal(30.0, "C", "c")]
    assert "3 removals within 600 s (maxDeletions 2)" in budgets_held(facts(three, pods, {}))[0]
    assert budgets_held(facts([*three[:2], removal(700.0, "C", "c")], pods, {})) == []
    same = [removal(10.0, "A"), removal(20.0, "B")]
    assert "2 removals in namespace a" in budgets_held(facts(same, [pod("A"), pod("B")], {}))[0]


def test_owner_share_fires_without_a_ready_replacement() -> None:
    pods = [pod("A"), pod("B"), pod("N")]
    pods[2].created = 15.0
    writes = [removal(10.0, "A"), removal(100.0, "B", "b")]
    assert "no replacement Ready" in owner_share_held(facts(writes, pods, {}))[0]
    assert owner_share_held(facts(writes, pods, {}, ready=[(40.0, "a/rs", "N")])) == []


def test_writes_fenced_fires_on_a_write_without_the_lease() -> None:
    stale = Write(100.0, "r0", "remove", "A", {"holder": "r0", "renewed": 80.0})
    other = Write(100.0, "r0", "event", "A", {"holder": "r1", "renewed": 99.0})
    fine = Write(100.0, "r0", "configmap", "x", {"holder": "r0", "renewed": 95.0})
    fired = writes_fenced(facts([stale, other, fine], [pod("A")], {}, leader_election=True))
    assert len(fired) == 2 and "holder r1" in fired[1]
    assert writes_fenced(facts([stale], [pod("A")], {}, leader_election=False)) == []


def test_ledger_ahead_fires_when_the_ledger_did_not_hold_the_pod() -> None:
    assert ledger_ahead(facts([removal(100.0, "A")], [pod("A")], {})) == []
    late = Write(100.0, "r0", "remove", "B", {"namespace": "a", "ledger": [LEDGER_A]})
    assert ledger_ahead(facts([late], [pod("B")], {})) == ["t=100 r0 removed B before the ledger held it"]


def test_accounted_fires_on_two_events_and_on_a_removal_without_one() -> None:
    event = Write(100.0, "r0", "event", "A", {"reason": "StalledPodDeleted", "kind": "Pod"})
    twice = facts([removal(100.0, "A"), event, event], [pod("A")], {}, now=200.0)
    assert accounted(twice) == ["2 StalledPodDeleted Events for pod A"]
    silent = facts([removal(100.0, "A")], [pod("A")], {}, now=200.0)
    assert accounted(silent) == ["pod A removed at t=100 without a StalledPodDeleted Event"]
    assert accounted(facts([removal(100.0, "A"), event], [pod("A")], {}, now=200.0)) == []
    # An unanswered removal (hour-long run, seed 16849): its Event waits for a cycle that reads the pod gone, at most
    # LIVENESS_INTERVALS cycles after the faults stop; later, silence fires again.
    lost = {"lost_removals": [100.0], "quiet_from": 150.0, "interval": 15.0}
    assert accounted(facts([removal(100.0, "A")], [pod("A")], {}, now=200.0, **lost)) == []
    assert accounted(facts([removal(100.0, "A")], [pod("A")], {}, now=210.0, **lost)) == [
        "pod A removed at t=100 without a StalledPodDeleted Event"]


def test_live_fires_on_a_wedged_pod_left_alone_or_held_by_a_rule_that_does_not_apply() -> None:
    base = {"now": 400.0, "quiet_from": 0.0}
    assert "neither removed nor held" in live(facts([], [pod("A")], {"A": 100.0}, **base))[0]
    not_leader = Write(300.0, "r0", "event", "A", {"reason": "StalledPodDeletionDeferred",
                                                   "message": "Deferred deletion ... Why: rule budget_unknown, x"})
    fired = live(facts([not_leader], [pod("A")], {"A": 100.0}, **base))
    assert "held by rule budget_unknown, which does not apply" in fired[0]
    budget = Write(300.0, "r0", "event", "A", {"reason": "StalledPodDeletionDeferred",
                                               "message": "Deferred ... Why: rule budget, 2 used"})
    used = [removal(250.0, "X", "x"), removal(260.0, "Y", "y")]
    pods = [pod("A"), pod("X", "x", "x/rs"), pod("Y", "y", "y/rs")]
    assert live(facts([*used, budget], pods, {"A": 100.0, "X": 0.0, "Y": 0.0}, **base)) == []
    assert live(facts([], [pod("A")], {"A": 350.0}, **base)) == []  # not wedged long enough yet
    # one deferral Event per episode and rule: budget announced first, then paused; the brake released, the budget
    # holds it again without a second Event: held by a rule it announced
    paused = Write(310.0, "r0", "event", "A", {"reason": "StalledPodDeletionDeferred",
                                               "message": "Deferred ... Why: rule paused, brake"})
    assert live(facts([*used, budget, paused], pods, {"A": 100.0, "X": 0.0, "Y": 0.0}, **base)) == []
    assert "held by rule paused" in live(facts([paused], [pod("A")], {"A": 100.0}, **base))[0]


def test_paused_held_fires_on_a_removal_while_the_brake_is_set() -> None:
    log = [(50.0, True, 0), (150.0, False, 1)]
    fired = paused_held(facts([removal(100.0, "A"), removal(200.0, "B")], [pod("A"), pod("B")], {}, brake_log=log))
    before = [(100.0, True, 1)]  # set at the very time of the removal, after it was applied: not held by it
    assert paused_held(facts([removal(100.0, "A")], [pod("A")], {}, brake_log=before)) == []
    assert fired == ["t=100 r0 removed A while the brake was set"]


def test_live_excuses_the_breaker_only_with_any_one_tenant_left_out() -> None:
    """The breaker excuse as the watchdog's rule has it: stalls of ONE tenant (two namespaces) do not hold back
    another tenant's wedge; stalls spread over three tenants do."""
    held = Write(300.0, "r0", "event", "A", {"reason": "StalledPodDeletionDeferred",
                                             "message": "Deferred ... Why: rule breaker, 9 of 10"})
    one_tenant = [{"x1": (4, 4, 4), "x2": (4, 4, 4), "a": (2, 1, 1)}]
    base = {"now": 400.0, "quiet_from": 0.0, "tenant_of": {"x1": "x", "x2": "x"}}
    fired = live(facts([held], [pod("A")], {"A": 100.0}, bad_by_step=one_tenant, **base))
    assert "held by rule breaker, which does not apply" in fired[0]
    spread = [{"x": (4, 4, 4), "y": (4, 4, 4), "z": (4, 4, 4), "a": (2, 1, 1)}]
    assert live(facts([held], [pod("A")], {"A": 100.0}, bad_by_step=spread, **base)) == []


def test_removed_only_wedged_fires_on_a_removal_after_an_opt_out() -> None:
    """A namespace set to dry-run, or a pod excluded, before the removal: a violation however stale the LIST that
    still showed it enforced (the remediator's fresh GET is what must catch it); an opt-out after it is not."""
    ns_flip = facts([removal(100.0, "A")], [pod("A")], {"A": 0.0}, opt_outs=[(90.0, "namespace", "a")])
    assert removed_only_wedged(ns_flip) == ["t=100 r0 removed a/A, opted out (namespace to dry-run or the pod "
                                            "excluded) at t=90"]
    excluded = facts([removal(100.0, "A")], [pod("A")], {"A": 0.0}, opt_outs=[(95.0, "pod", "A")])
    assert "opted out" in removed_only_wedged(excluded)[0]
    later = facts([removal(100.0, "A")], [pod("A")], {"A": 0.0},
                  opt_outs=[(110.0, "namespace", "a"), (90.0, "pod", "B"), (90.0, "namespace", "b")])
    assert removed_only_wedged(later) == []
    assert live(facts([], [pod("A")], {"A": 100.0}, now=400.0, quiet_from=0.0, opt_outs=[(200.0, "pod", "A")])) == []


def test_a_restart_ends_a_wedge_in_the_ground_truth() -> None:
    """The truth the safety oracle judges by: an engine hung from the start, restarted at 30 s and hung again at once
    has been wedged since 30 s (a new process), not since 0; the restart counts in restartCount; the counters read
    zero after it and nothing moves."""
    from sim_engines import Engine

    engine = Engine([(0.0, "wedged"), (30.0, "rewedged")])
    assert engine.wedged_since(20.0) == 0.0 and engine.wedged_since(50.0) == 30.0
    assert engine.restarts(29.0) == 0 and engine.restarts(30.0) == 1
    assert engine.behaviour(50.0) == "wedged" and engine.values(50.0)["gen"] == 0.0
    removed_early = facts([removal(80.0, "A")], [pod("A")], {"A": engine.wedged_since(80.0) or 0.0})
    assert "wedged for 50 s only" in removed_only_wedged(removed_early)[0]
