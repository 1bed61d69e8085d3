"""DeletionPolicy.decide, rule by rule in the docstring's order: each rule's whole Decision (action, rule and the
reason written to Events and logs) word for word (issue 28 item 6: decide was split into rule functions)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import rails

from watchdog.core.policy import Decision, DeletionPolicy

SERIES = 'engine="0",model_name="m"'
T0 = 1000.0


def policy(**limits: Any) -> DeletionPolicy:
    p = DeletionPolicy(rails(**limits), started=T0)
    p.begin_cycle(T0, watched=10, bad=0)
    return p


def decide(p: DeletionPolicy, uid: str = "u1", *, ns: str = "llm", mode: str = "enforce", owner: str | None = None,
           age: float | None = 1e6, now: float = T0 + 200, leader: bool = True) -> Decision:
    return p.decide(uid=uid, series=SERIES, namespace=ns, namespace_mode=mode, owner=owner, pod_age_s=age, now=now,
                    leader=leader)


RETRY = Decision("retry", "retry", "the answer to this pod's removal was lost and the pod is still there: sent again "
                                   "(same UID precondition, charged from this send)")


def test_a_lost_answer_is_retried_only_while_every_rail_but_the_budgets_allows_it() -> None:
    """Fresh-eyes finding: the retry skipped the breakers and the unknown budget (a webhook failing for an hour,
    then fixed, removed every wedged pod at once)."""
    p = policy(max_deletions=1, max_deletions_per_namespace=1)
    p.settle("lost", T0 + 200, uid="u1", series=SERIES, namespace="llm", owner=None, again=False)
    assert decide(p, now=T0 + 201) == RETRY  # the budgets (used by this very removal) do not hold it
    assert decide(p, now=T0 + 201, mode="dry-run").action == "dry_run"  # flipped to dry-run: not sent again
    assert decide(p, now=T0 + 201, leader=False).rule == "not_leader"
    p.begin_cycle(T0 + 201, watched=10, bad=0, namespaces={"llm": (3, 3)})
    assert decide(p, now=T0 + 202).rule == "namespace_breaker"
    p.begin_cycle(T0 + 202, watched=10, bad=5)
    assert decide(p, now=T0 + 203).rule == "breaker"
    p = policy(max_deletions=1, max_deletions_per_namespace=1)
    p.settle("lost", T0 + 200, uid="u1", series=SERIES, namespace="llm", owner=None, again=False)
    p.forget_budget()
    assert decide(p, now=T0 + 201).rule == "budget_unknown"
    p.restore([])
    assert decide(p, now=T0 + 201) == RETRY
    p.set_brake("brake")
    assert decide(p, now=T0 + 201) == Decision("defer", "paused", "the watchdog is paused (brake)", None,
                                               "when the brake is released")
    p.set_brake(None)
    p.record("u1", SERIES)
    assert decide(p, now=T0 + 201).rule == "episode"


def test_a_retry_is_charged_from_its_own_send() -> None:
    """Fresh-eyes finding: a retry's charge ran out one window after the FIRST send, so a removal sent again an
    hour later counted nowhere and other pods were removed past the budget."""
    p = policy(max_deletions=1, max_deletions_per_namespace=1, deletion_window_seconds=600.0)
    p.record_deletion(T0 + 200, uid="u1", namespace="llm", owner=None)
    p.settle("done", T0 + 3600, uid="u1", series=SERIES, namespace="llm", owner=None, again=True)  # an hour later
    assert decide(p, "u2", ns="other", now=T0 + 3700).rule == "budget"
    assert p.view(T0 + 3700)["budget"]["cluster"]["used"] == 1  # one entry per pod, never two
    assert decide(p, "u2", ns="other", now=T0 + 4200).action == "delete"


def test_without_a_ledger_an_earlier_replicas_removals_are_unknown_for_a_while() -> None:
    p = policy()
    p.restore([], blind_until=T0 + 700)
    assert decide(p, now=T0 + 200) == Decision(
        "defer", "budget_unknown", "no deletion ledger (budgetLedger: false): what an earlier replica removed is "
                                   "unknown for 500 s more", 500.0,
        "when what an earlier replica removed no longer counts")
    assert decide(p, now=T0 + 700).action == "delete"


def _acted(p: DeletionPolicy) -> DeletionPolicy:
    p.record("u1", SERIES)
    return p


def _budget_unknown(p: DeletionPolicy) -> DeletionPolicy:
    p.forget_budget()
    return p


def _breaker(p: DeletionPolicy) -> DeletionPolicy:
    p.begin_cycle(T0 + 200, watched=10, bad=5)
    return p


def _ns_breaker(p: DeletionPolicy) -> DeletionPolicy:
    p.begin_cycle(T0 + 200, watched=10, bad=0, namespaces={"llm": (5, 5)})
    return p


def _spent(p: DeletionPolicy) -> DeletionPolicy:
    p.record_deletion(T0 + 100, uid="a", namespace="x", owner=None)
    p.record_deletion(T0 + 101, uid="b", namespace="y", owner=None)
    return p


def _ns_spent(p: DeletionPolicy) -> DeletionPolicy:
    p.record_deletion(T0 + 100, uid="a", namespace="llm", owner=None)
    return p


def _owner_lost(p: DeletionPolicy) -> DeletionPolicy:
    p.record_deletion(T0 + 100, uid="a", namespace="other", owner="llm/ReplicaSet/r")
    return p


CASES: list[tuple[str, Any, dict[str, Any], dict[str, Any], Decision]] = [
    ("episode", _acted, {}, {}, Decision("skip", "episode", "already acted on this stall episode")),
    ("not_leader", None, {}, {"leader": False},
     Decision("defer", "not_leader", "this replica does not hold the leader Lease", None,
              "when this replica holds the leader Lease")),
    ("global dry-run", None, {"dry_run": True}, {}, Decision("dry_run", "dry_run", "global dryRun is on")),
    ("namespace dry-run", None, {}, {"mode": "dry-run"},
     Decision("dry_run", "dry_run", "namespace is labelled dry-run")),
    ("paused", None, {"paused": True}, {}, Decision("defer", "paused", "the watchdog is paused (paused: true)", None,
                                                       "when paused is set back to false")),
    ("warm_up", None, {}, {"now": T0 + 100},
     Decision("defer", "warm_up", "warming up: no deletion before a full 120 s window since start and since the "
                                  "first pod listing", 19.0, "when the warm-up ends")),
    ("min_age", None, {}, {"age": 30.5}, Decision("defer", "min_age", "pod age 30 s is below the minimum 120 s",
                                                  88.5, "when the pod reaches the minimum age")),
    ("min_age explicit", None, {"min_pod_age_seconds": 60.5}, {"age": 30.5},
     Decision("defer", "min_age", "pod age 30 s is below the minimum 60.5 s", 30.0,
              "when the pod reaches the minimum age")),
    ("min_age unknown", None, {"min_pod_age_seconds": 60.5}, {"age": None},
     Decision("defer", "min_age", "pod age unknown is below the minimum 60.5 s", None,
              "once the pod's age is known")),
    ("breaker", _breaker, {}, {},
     Decision("defer", "breaker", "mass-stall breaker is open: too many pods look stalled at once, more likely a "
                                  "network or monitoring fault", 300.0,
              "when the breaker closes (its 300 s cooldown ends, if no cycle trips it again)")),
    ("namespace_breaker", _ns_breaker, {}, {},
     Decision("defer", "namespace_breaker", "the breaker of namespace llm is open: too many of its pods look "
                                            "stalled or cannot be judged", 300.0,
              "when the breaker of namespace llm closes (its 300 s cooldown ends, if no cycle trips it again)")),
    ("budget_unknown", _budget_unknown, {}, {},
     Decision("defer", "budget_unknown", "earlier deletions could not be read back yet from the deletion ledger; "
                                         "the budget is unknown", None, "once the deletion ledger is read back")),
    ("budget", _spent, {}, {},
     Decision("defer", "budget", "cluster budget used: 2 deletions in the last 600 s (max 2)", 500.0,
              "when the oldest counted deletion leaves the rolling 600 s window")),
    ("namespace_budget", _ns_spent, {}, {},
     Decision("defer", "namespace_budget", "namespace budget used: 1 deletions in llm in the last 600 s", 500.0,
              "when the oldest counted deletion in llm leaves the rolling 600 s window")),
    ("owner", _owner_lost, {"max_deletions": 5}, {"owner": "llm/ReplicaSet/r"},
     Decision("defer", "owner", "llm/ReplicaSet/r already lost a pod; waiting for its replacement to be Ready",
              None, "when the replacement pod is Ready")),
    ("enforce", None, {}, {}, Decision("delete", "enforce", "namespace is enforced and every rail allows it")),
]


@pytest.mark.parametrize(("name", "setup", "rails", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_decides_word_for_word(name: str, setup: Any, rails: dict[str, Any], call: dict[str, Any],
                                         expected: Decision) -> None:
    p = policy(**rails)
    if setup is not None:
        p = setup(p)
    assert decide(p, **call) == expected


def test_the_first_rule_that_applies_decides() -> None:
    """Everything holds at once, then one rule after another is lifted: the rules are checked in the docstring's
    order and the first that applies decides."""
    p = policy(max_deletions=2)
    p.record_deletion(T0 + 100, uid="a", namespace="y", owner=None)
    p.record_deletion(T0 + 101, uid="b", namespace="llm", owner="llm/ReplicaSet/r")
    p.begin_cycle(T0 + 200, watched=10, bad=5)  # the fleet breaker, open until T0 + 500
    p.begin_cycle(T0 + 300, watched=10, bad=0, namespaces={"llm": (5, 5)})  # llm's, open until T0 + 600
    p.forget_budget()
    p.set_brake("brake")
    old: dict[str, Any] = {"owner": "llm/ReplicaSet/r"}
    young: dict[str, Any] = {**old, "age": 1.0}
    p.record("u1", SERIES)
    assert decide(p, leader=False, mode="dry-run", **young).rule == "episode"
    p.episode_over("u1", SERIES)
    assert decide(p, leader=False, mode="dry-run", **young).rule == "not_leader"
    assert decide(p, mode="dry-run", **young).rule == "dry_run"
    assert decide(p, now=T0 + 350, **young).rule == "paused"
    p.set_brake(None)
    assert decide(p, now=T0 + 350, **young).rule == "min_age"
    assert decide(p, now=T0 + 350, **old).rule == "breaker"
    assert decide(p, now=T0 + 550, **old).rule == "namespace_breaker"
    assert decide(p, now=T0 + 650, **old).rule == "budget_unknown"
    p.restore([])
    assert decide(p, now=T0 + 650, **old).rule == "budget"
    assert decide(p, now=T0 + 700, **old).rule == "namespace_budget"  # a's removal is out of the window
    assert decide(p, ns="x", now=T0 + 700, **old).rule == "owner"
    assert decide(p, ns="x", now=T0 + 700).rule == "enforce"
    fresh = DeletionPolicy(rails(paused=True), started=T0)
    assert decide(fresh, **young).rule == "paused"
    fresh = DeletionPolicy(rails(), started=T0)
    assert decide(fresh, **young).rule == "warm_up"


@pytest.mark.parametrize("end", ["episode_over", "forget_pods"])
def test_what_an_episode_kept_ends_with_it(end: str) -> None:
    """A stall episode's state ends together (DeletionPolicy._Episode): its PDB backoff and its evidence record do
    not outlive the episode, nor the pod."""
    p = policy()
    p.refused("u1", SERIES, T0 + 200, "a PodDisruptionBudget")
    assert p.evidence("u1", SERIES, lambda: "rec-1") == p.evidence("u1", SERIES, lambda: "rec-2") == "rec-1"
    assert decide(p, now=T0 + 201).rule == "pdb"
    p.episode_over("u1", SERIES) if end == "episode_over" else p.forget_pods(set())
    assert decide(p, now=T0 + 201).action == "delete"
    assert p.evidence("u1", SERIES, lambda: "rec-2") == "rec-2"


@pytest.mark.parametrize(("outcome", "charged", "then"), [
    ("done", True, "episode"),  # applied: charged as of its answer, the episode acted on
    ("lost", True, "retry"),  # may have been applied: charged (fail closed), sent again next cycle
    ("not_found", False, "enforce"), ("conflict", False, "enforce"), ("refused", False, "enforce"),
    ("fenced", False, "enforce"), ("unrecorded", False, "enforce"),  # not applied, nothing to settle
])
def test_settle_accounts_for_a_removal_from_its_outcome_alone(outcome: str, charged: bool, then: str) -> None:
    """Issue 38: settle is pure: charge, retry and the episode from the actuator's outcome, nothing else read."""
    p = policy(max_deletions=1, max_deletions_per_namespace=1)
    p.settle(outcome, T0 + 200, uid="u1", series=SERIES, namespace="llm", owner=None, again=False,  # type: ignore[arg-type]
             pending="what to report")
    assert (p.view(T0 + 200)["budget"]["cluster"]["used"], decide(p, now=T0 + 201).rule) == (int(charged), then)
    assert p.unsettled == ({("u1", SERIES): "what to report"} if outcome == "lost" else {})
    p.resolved("u1", SERIES)  # seen gone after all: acted on, nothing left unsettled
    assert (decide(p, now=T0 + 201).rule, p.unsettled) == ("episode", {})


@pytest.mark.parametrize("outcome", ["done", "lost", "not_found", "refused", "fenced"])
def test_settle_moves_a_retry_to_its_own_send_and_never_charges_it_twice(outcome: str) -> None:
    """A removal sent again after a lost answer: its ledger record was written again, so its charge moves to this
    answer (a whole window from the last send), whatever it came to; still one charge, never two."""
    p = policy(max_deletions=5, max_deletions_per_namespace=5)
    p.settle("lost", T0 + 200, uid="u1", series=SERIES, namespace="llm", owner=None, again=False)
    p.settle(outcome, T0 + 900, uid="u1", series=SERIES, namespace="llm", owner=None, again=True)  # type: ignore[arg-type]
    assert p.view(T0 + 900)["budget"]["cluster"]["used"] == 1
    assert p.view(T0 + 1400)["budget"]["cluster"]["used"] == 1  # the 600 s window counts from the retry
    p = policy(max_deletions=5, max_deletions_per_namespace=5)
    p.settle("lost", T0 + 200, uid="u1", series=SERIES, namespace="llm", owner=None, again=False)
    p.settle("unrecorded", T0 + 900, uid="u1", series=SERIES, namespace="llm", owner=None, again=True)
    assert p.view(T0 + 1400)["budget"]["cluster"]["used"] == 0  # no record written again: not moved


def test_a_stall_episode_opens_once_and_ends_only_when_the_engine_settles() -> None:
    """Issue 38: the episode lives in the policy alone (the cycle asks it, the stalls counter counts its openings)."""
    p = policy()
    assert p.stalled("u1", SERIES) and not p.stalled("u1", SERIES)  # still stalled (a failed scrape between): open
    p.episode_over("u1", SERIES)
    assert p.stalled("u1", SERIES)  # stalled again after progress: a new episode
