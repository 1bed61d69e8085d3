"""When a deferral frees (issue 30 item 3): every deferring rule of DeletionPolicy.decide says when the held
deletion may happen, in seconds from the decision's ``now`` where time alone frees it, and each timed answer is
exact: a decision at ``now + frees_in_s`` is no longer held by that rule, one 0.1 s earlier still is."""

from __future__ import annotations

from typing import Any

import pytest
from builders import rails

from watchdog.core.policy import Decision, DeletionPolicy

SERIES = 'engine="0",model_name="m"'


def policy(started: float = 0.0, listed: float = 0.0, **limits: Any) -> DeletionPolicy:
    p = DeletionPolicy(rails(**limits), started=started)
    p.begin_cycle(listed, watched=10, bad=0)
    return p


def decide(p: DeletionPolicy, now: float, *, ns: str = "llm", age: float | None = 1e6,
           owner: str | None = None) -> Decision:
    return p.decide(uid="u1", series=SERIES, namespace=ns, namespace_mode="enforce", owner=owner, pod_age_s=age,
                    now=now)


def answer(p: DeletionPolicy, now: float, **pod: Any) -> tuple[str | None, float | None, str | None]:
    """What holds the deletion decided at ``now``: (rule, frees_in_s, frees_when)."""
    held = decide(p, now, **pod)
    return held.rule, held.frees_in_s, held.frees_when


def assert_frees_exactly(p: DeletionPolicy, now: float, rule: str, frees_in_s: float) -> None:
    """Held by ``rule`` 0.1 s before ``now + frees_in_s``; at it, the deletion goes ahead."""
    assert decide(p, now + frees_in_s - 0.1).rule == rule
    assert decide(p, now + frees_in_s).action == "delete"


def test_the_budget_frees_when_its_oldest_counted_deletion_leaves_the_window() -> None:
    """A budget of 1 per 600 s, a deletion at t=100: a deferral at t=250 frees in 450 s, at t=700."""
    p = policy(max_deletions=1, max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    p.record_deletion(100.0, uid="a", namespace="other", owner=None)
    assert answer(p, 250.0) == ("budget", 450.0, "when the oldest counted deletion leaves the rolling 600 s window")
    assert_frees_exactly(p, 250.0, "budget", 450.0)


def test_the_namespace_budget_frees_when_its_oldest_deletion_in_the_namespace_leaves() -> None:
    p = policy(max_deletions=5, max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    p.record_deletion(50.0, uid="x", namespace="other", owner=None)  # not this namespace's
    p.record_deletion(100.0, uid="a", namespace="llm", owner=None)
    assert answer(p, 250.0) == (
        "namespace_budget", 450.0, "when the oldest counted deletion in llm leaves the rolling 600 s window")
    assert_frees_exactly(p, 250.0, "namespace_budget", 450.0)


def test_more_deletions_than_the_budget_free_it_when_enough_of_them_left() -> None:
    """Read back from the ledger, 3 deletions against a budget of 2: room again when the 2nd oldest leaves."""
    p = policy(max_deletions=2, max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    p.restore([(100.0, "a", "ua"), (150.0, "b", "ub"), (200.0, "c", "uc")])
    assert answer(p, 250.0) == ("budget", 500.0, "when the 2 oldest counted deletions leave the rolling 600 s window")
    assert_frees_exactly(p, 250.0, "budget", 500.0)


def test_a_budget_of_zero_frees_only_when_raised() -> None:
    assert answer(policy(max_deletions=0), 250.0) == ("budget", None, "once maxDeletions is raised above 0")
    assert answer(policy(max_deletions_per_namespace=0), 250.0) == (
        "namespace_budget", None, "once maxDeletionsPerNamespace is raised above 0")


def test_the_warm_up_frees_a_window_after_the_later_of_start_and_first_listing() -> None:
    """Window 120 s (its slack 1 s), first pod listing at t=30: the warm-up ends at t=149."""
    p = policy(started=0.0, listed=30.0, window_seconds=120.0)
    assert answer(p, 50.0) == ("warm_up", 99.0, "when the warm-up ends")
    assert_frees_exactly(p, 50.0, "warm_up", 99.0)
    never_listed = DeletionPolicy(rails(window_seconds=120.0), started=0.0)
    assert answer(never_listed, 50.0) == ("warm_up", None, "a full 120 s window after the first pod listing")


@pytest.mark.parametrize(("explicit", "age", "frees"), [(None, 30.5, 88.5), (60.0, 30.5, 29.5)])
def test_a_young_pod_frees_when_it_reaches_the_minimum_age(explicit: float | None, age: float, frees: float) -> None:
    """The default minimum (the window, 120 s, less its 1 s slack) and an explicit one (exact)."""
    p = policy(window_seconds=120.0, min_pod_age_seconds=explicit)
    assert answer(p, 500.0, age=age) == ("min_age", frees, "when the pod reaches the minimum age")
    assert decide(p, 500.0 + frees - 0.1, age=age + frees - 0.1).rule == "min_age"
    assert decide(p, 500.0 + frees, age=age + frees).action == "delete"
    assert answer(p, 500.0, age=None) == ("min_age", None, "once the pod's age is known")


def test_the_fleet_breaker_frees_when_its_cooldown_ends_unless_tripped_again() -> None:
    p = policy(breaker_cooldown_seconds=300.0)
    p.begin_cycle(200.0, watched=10, bad=5)  # open until t=500
    assert answer(p, 250.0) == (
        "breaker", 250.0, "when the breaker closes (its 300 s cooldown ends, if no cycle trips it again)")
    p.begin_cycle(260.0, watched=10, bad=5)  # tripped again: open until t=560
    assert decide(p, 300.0).frees_in_s == 260.0
    assert_frees_exactly(p, 300.0, "breaker", 260.0)


def test_the_namespace_breaker_frees_when_its_cooldown_ends() -> None:
    p = policy(breaker_cooldown_seconds=300.0)
    p.begin_cycle(200.0, watched=10, bad=0, namespaces={"llm": (3, 3)})  # open until t=500
    assert answer(p, 250.0) == (
        "namespace_breaker", 250.0,
        "when the breaker of namespace llm closes (its 300 s cooldown ends, if no cycle trips it again)")
    assert_frees_exactly(p, 250.0, "namespace_breaker", 250.0)


def test_an_unknown_budget_frees_once_read_back_or_when_the_blind_period_ends() -> None:
    p = policy()
    p.forget_budget()
    assert answer(p, 250.0) == ("budget_unknown", None, "once the deletion ledger is read back")
    p.restore([], blind_until=700.0)  # no ledger: blind for a while
    assert answer(p, 250.0) == ("budget_unknown", 450.0, "when what an earlier replica removed no longer counts")
    assert_frees_exactly(p, 250.0, "budget_unknown", 450.0)


def test_the_rules_that_time_does_not_free_say_what_does() -> None:
    owner = policy(max_deletions=5)
    owner.record_deletion(100.0, uid="a", namespace="other", owner="llm/ReplicaSet/r")
    assert answer(owner, 250.0, owner="llm/ReplicaSet/r") == ("owner", None, "when the replacement pod is Ready")
    braked = policy()
    braked.set_brake("annotation vllm-watchdog.io/paused=true on configmap wd/wd")
    assert answer(braked, 250.0) == ("paused", None, "when the brake is released")
    paused = policy(paused=True)
    assert answer(paused, 250.0) == ("paused", None, "when paused is set back to false")
    standby = policy().decide(uid="u1", series=SERIES, namespace="llm", namespace_mode="enforce", owner=None,
                              pod_age_s=1e6, now=250.0, leader=False)
    assert (standby.rule, standby.frees_in_s, standby.frees_when) == (
        "not_leader", None, "when this replica holds the leader Lease")


def test_what_holds_a_stall_is_kept_for_status_until_its_next_decision() -> None:
    """held(): what holds an episode as of its last decision, its frees_in_s counted from the view's now; and
    whether this is the episode's first deferral (by any rule) and the rule's first (the metrics count once)."""
    p = policy(max_deletions=1, max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    p.record_deletion(100.0, uid="a", namespace="other", owner=None)
    budget = decide(p, 250.0)
    assert p.held("u1", SERIES, budget, 250.0) == (True, True)
    assert p.episodes(260.0)("u1", SERIES) == (None, ["budget"], {
        "rule": "budget", "frees_in_s": 440.0,
        "frees_when": "when the oldest counted deletion leaves the rolling 600 s window"})
    assert p.held("u1", SERIES, decide(p, 300.0), 300.0) == (False, False)  # 24 cycles held: counted once
    p.begin_cycle(310.0, watched=10, bad=5)
    assert p.held("u1", SERIES, decide(p, 320.0), 320.0) == (False, True)  # a new rule: its own Event
    assert p.episodes(320.0)("u1", SERIES)[2] == {
        "rule": "breaker", "frees_in_s": 290.0,
        "frees_when": "when the breaker closes (its 300 s cooldown ends, if no cycle trips it again)"}
    assert decide(p, 800.0).action == "delete"
    assert p.episodes(800.0)("u1", SERIES) == (None, ["breaker", "budget"], None)  # no longer held
    p.episode_over("u1", SERIES)
    assert p.held("u1", SERIES, decide(p, 800.0, age=1.0), 800.0) == (True, True)  # a new episode
    p.forget_pods(set())
    assert p.episodes(800.0)("u1", SERIES) == (None, [], None)
