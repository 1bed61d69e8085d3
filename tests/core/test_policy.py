"""The deletion policy (pure): dry-run, one decision per episode, and every safety rail.

Each rail was removed once from watchdog/core/policy.py and the test named after it failed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from builders import rails

from watchdog.core.events import REASON_DEFERRED, REASON_DELETED, REASON_DRY_RUN
from watchdog.core.model import WatchedPod
from watchdog.core.policy import PAUSE_ANNOTATION, CycleStatus, Decision, DeletionPolicy, brake_from, votes
from watchdog.core.vocab import DeferralRule

SERIES = 'engine="0",model_name="m"'
T0 = 1000.0  # monotonic seconds at start


def policy(**limits: Any) -> DeletionPolicy:
    """A policy past warm-up (started and first listing at T0, decisions at T0 + 200 and later)."""
    p = DeletionPolicy(rails(**limits), started=T0)
    p.begin_cycle(T0, watched=10, bad=0)
    return p


def decide(p: DeletionPolicy, uid: str = "u1", *, ns: str = "llm", mode: str = "enforce", owner: str | None = None,
           age: float | None = 1e6, now: float = T0 + 200, leader: bool = True, series: str = SERIES) -> Decision:
    return p.decide(uid=uid, series=series, namespace=ns, namespace_mode=mode, owner=owner, pod_age_s=age, now=now,
                    leader=leader)


def delete(p: DeletionPolicy, uid: str, now: float, ns: str = "llm", owner: str | None = None) -> None:
    assert decide(p, uid, ns=ns, owner=owner, now=now).action == "delete"
    p.record_deletion(now, uid=uid, namespace=ns, owner=owner)


def test_enforced_namespace_deletes_and_reasons() -> None:
    assert decide(policy()) == Decision("delete", "enforce", "namespace is enforced and every rail allows it")
    assert (REASON_DELETED, REASON_DRY_RUN, REASON_DEFERRED) == (
        "StalledPodDeleted", "StalledPodDryRun", "StalledPodDeletionDeferred")


def test_dry_run_global_and_per_namespace() -> None:
    assert decide(policy(), mode="dry-run").action == "dry_run"
    assert decide(policy(), mode="").action == "dry_run"  # anything but enforce never deletes
    assert decide(policy(dry_run=True)).rule == "dry_run"


def test_one_decision_per_episode() -> None:
    p = policy()
    p.record("u1", SERIES)
    assert decide(p).action == "skip"
    assert decide(p, series='engine="1",model_name="m"').action == "delete"
    p.episode_over("u1", SERIES)
    assert decide(p).action == "delete"
    p.record("u1", SERIES)
    p.forget_pods({"other"})
    assert decide(p).action == "delete"


def test_rate_limit_cluster_wide_rolling_window() -> None:
    p = policy(max_deletions=2, max_deletions_per_namespace=5, deletion_window_seconds=600)
    delete(p, "a", T0 + 200)
    delete(p, "b", T0 + 300)
    d = decide(p, "c", now=T0 + 400)
    assert (d.action, d.rule) == ("defer", "budget")
    assert "2 deletions in the last 600 s" in d.why
    assert decide(p, "c", now=T0 + 799).action == "defer"  # the first deletion is 599 s old
    assert decide(p, "c", now=T0 + 800).action == "delete"  # ... and now 600 s: out of the window


def test_rate_limit_per_namespace() -> None:
    p = policy(max_deletions=5, max_deletions_per_namespace=1)
    delete(p, "a", T0 + 200, ns="team-a")
    assert decide(p, "b", ns="team-a", now=T0 + 201).rule == "namespace_budget"
    assert decide(p, "c", ns="team-b", now=T0 + 201).action == "delete"


def test_one_per_owner_until_its_replacement_is_ready() -> None:
    p = policy(max_deletions=5, max_deletions_per_namespace=5)
    owner = "llm/ReplicaSet/llama-7d9"
    delete(p, "old", T0 + 200, owner=owner)
    assert decide(p, "sibling", owner=owner, now=T0 + 201).rule == "owner"
    p.owner_ready(owner, first_seen=T0 + 50)  # a Ready sibling that was there before is no replacement
    assert decide(p, "sibling", owner=owner, now=T0 + 202).rule == "owner"
    p.owner_ready(owner, first_seen=T0 + 230)  # the replacement, first seen after the deletion, is Ready
    assert decide(p, "sibling", owner=owner, now=T0 + 240).action == "delete"
    assert decide(p, "other", owner="llm/StatefulSet/x", now=T0 + 240).action == "delete"


def test_breaker_trips_on_mass_stall_and_closes_after_cooldown() -> None:
    p = policy(breaker_fraction=0.3, breaker_min_pods=3, breaker_cooldown_seconds=300)
    assert p.begin_cycle(T0 + 200, watched=10, bad=4) == CycleStatus(breaker_tripped=True, breaker_open=True)
    assert decide(p, now=T0 + 200).rule == "breaker"
    status = p.begin_cycle(T0 + 300, watched=10, bad=4)  # still over: stays open, not "tripped" again
    assert status == CycleStatus(breaker_tripped=False, breaker_open=True)
    assert decide(p, now=T0 + 550).rule == "breaker"
    p.begin_cycle(T0 + 560, watched=10, bad=1)
    assert decide(p, now=T0 + 599).rule == "breaker"
    assert decide(p, now=T0 + 600).action == "delete"  # 300 s after the last cycle over the threshold


@pytest.mark.parametrize("watched, bad, trips", [(10, 3, False), (10, 4, True), (4, 2, False), (5, 3, True),
                                                 (2, 2, False)])
def test_breaker_threshold_is_a_fraction_and_a_minimum(watched: int, bad: int, trips: bool) -> None:
    p = policy()
    p.begin_cycle(T0 + 10, watched=watched, bad=bad)
    assert p.breaker_open(T0 + 10) is trips


def test_one_namespace_never_opens_the_fleet_breaker() -> None:
    """Issue 27 item 5: a tenant's pods serving a frozen "busy" exposition (its namespace dry-run or enforced) and
    one genuine wedge elsewhere made "4 of 7 watched pods looked stalled": the fleet breaker opened and held the
    wedge back for as long as the tenant kept its pods. Without the tenant: 1 of 4."""
    p = policy()
    counts = {"tenant": (3, 3), "prod": (4, 1)}
    status = p.begin_cycle(T0 + 200, watched=7, bad=4, namespaces=counts, spread=counts)
    assert status == CycleStatus(breaker_tripped=False, breaker_open=False, namespaces_tripped=("tenant",))
    assert decide(p, "wedge", ns="prod").action == "delete"
    assert decide(p, "fake", ns="tenant").rule == "namespace_breaker"  # the tenant holds back its own namespace
    assert decide(p, "fake", ns="tenant", mode="dry-run").action == "dry_run"
    many = {"tenant": (50, 50), "prod": (4, 1), "quiet": (10, 0)}  # however many pods it runs
    assert not p.begin_cycle(T0 + 215, watched=64, bad=51, spread=many).breaker_open
    assert decide(p, "wedge", ns="prod", now=T0 + 215).action == "delete"


def test_one_tenant_is_one_voter_however_many_namespaces_it_has() -> None:
    """Issue 36 item 5: 16 fake-wedged pods of one tenant split over two namespaces beside team-a's real wedge and
    20 healthy pods. Counted per namespace they looked like two witnesses ("17 of 37", 9 of 29 without either
    namespace): the fleet breaker opened. Counted per tenant (the spread the cycle builds), they are one: 1 of 21
    without tenant x, and team-a's wedge is deleted."""
    per_namespace = {"x-dev": (8, 8), "x-stage": (8, 8), "team-a": (1, 1), "llm": (20, 0)}
    assert policy().begin_cycle(T0 + 200, watched=37, bad=17, spread=per_namespace).breaker_open
    p = policy()
    per_tenant = {"capsule.clastix.io/tenant=x": (16, 16), "team-a": (1, 1), "llm": (20, 0)}
    assert not p.begin_cycle(T0 + 200, watched=37, bad=17, spread=per_tenant).breaker_open
    assert decide(p, "wedge", ns="team-a").action == "delete"


def test_only_pods_in_enforced_namespaces_vote() -> None:
    """Issue 36 item 5: a pod the watchdog may never remove (a dry-run namespace's) must not vote in the fleet
    breaker; an enforced namespace's does, whatever its target's action."""
    pod = WatchedPod(uid="u", namespace="x-dev", name="p", ip="10.0.0.1", port=8000, path="/metrics",
                     target_name="vllm", profile="vllm", mode="dry-run", restart_count=0, owner=None)
    assert not votes(pod)
    assert votes(replace(pod, mode="enforce"))


@pytest.mark.parametrize("spread, trips", [
    ({"a": (1, 1), "b": (1, 1), "c": (1, 1), "llm": (7, 0)}, False),  # 3 of 10 = 30%: not more
    ({"a": (1, 1), "b": (1, 1), "c": (1, 1), "d": (1, 1), "llm": (7, 0)}, False),  # without a: 3 of 10 again
    ({"a": (1, 1), "b": (1, 1), "c": (1, 1), "d": (1, 1), "e": (1, 1), "llm": (7, 0)}, True),  # 4 of 11 without any
    ({"a": (2, 2), "b": (2, 2), "c": (2, 2), "d": (2, 2), "llm": (5, 0)}, True),  # a storm: without a, 6 of 11
    ({"a": (3, 3), "b": (3, 3)}, True),  # two namespaces all stalled: either one alone is over the thresholds
    ({"a": (3, 3), "b": (3, 2)}, False),  # without a: 2 pods, below breakerMinPods (b's own breaker stays shut too)
    ({"llm": (10, 10)}, False),  # a fleet in one namespace: its own breaker judges it
])
def test_the_fleet_breaker_holds_with_any_one_namespace_left_out(spread: dict[str, tuple[int, int]],
                                                                 trips: bool) -> None:
    p = policy()
    watched, bad = sum(w for w, _ in spread.values()), sum(b for _, b in spread.values())
    status = p.begin_cycle(T0 + 200, watched=watched, bad=bad, namespaces=spread, spread=spread)
    assert (status.breaker_tripped, status.breaker_open) == (trips, trips)
    if trips:
        assert p.view(T0 + 200)["breaker"]["why"] == (
            f"{bad} of {watched} enforced pods looked stalled, in {sum(1 for _, b in spread.values() if b)} "
            "tenants (over the thresholds with any one of them left out)")
    else:
        assert decide(p, ns="quiet").action == "delete"


def test_warm_up_needs_a_window_since_start_and_since_first_listing() -> None:
    p = DeletionPolicy(rails(window_seconds=120), started=T0)
    assert decide(p, now=T0 + 500).rule == "warm_up"  # never listed pods yet
    p.begin_cycle(T0 + 301, watched=1, bad=0, listed_at=T0 + 300)  # the API answered only at T0+300 (429s before)
    assert decide(p, now=T0 + 418.9).rule == "warm_up"
    assert decide(p, now=T0 + 419).action == "delete"  # a window since the listing, less the detector's 1 s slack


def test_minimum_pod_age_defaults_to_the_window() -> None:
    assert decide(policy(window_seconds=120), age=118.9).rule == "min_age"
    assert decide(policy(window_seconds=120), age=None).rule == "min_age"
    assert decide(policy(window_seconds=120), age=119).action == "delete"  # the window less the detector's slack
    assert decide(policy(window_seconds=120, min_pod_age_seconds=200), age=199.9).rule == "min_age"  # exact
    assert decide(policy(window_seconds=120, min_pod_age_seconds=3600), age=600).rule == "min_age"


def test_pause_and_leadership() -> None:
    assert decide(policy(paused=True)).rule == "paused"
    assert decide(policy(), leader=False).rule == "not_leader"
    # Issue 27 item 6: a standby decides nothing else, dry-run included (it would write the StalledPodDryRun
    # Event and the evidence and read the log a second time), nor a paused deferral (its Event).
    assert decide(policy(), leader=False, mode="dry-run").rule == "not_leader"
    assert decide(policy(dry_run=True), leader=False).rule == "not_leader"
    assert decide(policy(paused=True), leader=False).rule == "not_leader"
    assert decide(policy(paused=True), mode="dry-run").action == "dry_run"  # pause still reports


def test_unknown_budget_fails_closed_until_restored() -> None:
    p = policy()
    p.forget_budget()
    assert not p.budget_known and decide(p).rule == "budget_unknown"
    p.restore([(T0 + 150, "llm", "u1"), (T0 + 100, "other", "u2")])
    assert p.budget_known
    assert decide(p, ns="third").rule == "budget"  # two restored deletions use up the default budget of 2


def first_deferral(p: DeletionPolicy, uid: str, rule: DeferralRule) -> bool:
    """Whether a deferral by ``rule`` of ``uid``'s stall episode is the first by that rule (its Event is written)."""
    return p.held(uid, SERIES, Decision("defer", rule, "held"), T0)[1]


def test_deferral_is_announced_once_per_episode_and_rule() -> None:
    p = policy()
    assert first_deferral(p, "u1", "budget")
    assert not first_deferral(p, "u1", "budget")
    assert first_deferral(p, "u1", "breaker")
    p.episode_over("u1", SERIES)
    assert first_deferral(p, "u1", "budget")


def test_a_dry_run_announcement_does_not_stand_for_the_deletion_after_a_flip_to_enforce() -> None:
    """Issue 11 item 3: dry-run -> enforce must start a new decision for a wedge already announced."""
    p = policy()
    assert decide(p, mode="dry-run").action == "dry_run"
    p.record("u1", SERIES, "dry_run")
    assert decide(p, mode="dry-run").action == "skip"  # announced once per episode
    assert decide(p, mode="enforce").action == "delete"  # flipped: a new decision
    p.record("u1", SERIES, "delete")
    assert decide(p, mode="enforce").action == "skip"
    assert decide(p, mode="dry-run").action == "skip"  # a deletion is never re-announced


def test_the_run_time_brake_is_the_one_pause_rule() -> None:
    p = policy()
    p.set_brake("annotation vllm-watchdog.io/paused=true on configmap wd/wd")
    assert decide(p) == Decision("defer", "paused", "the watchdog is paused (annotation vllm-watchdog.io/paused=true "
                                                    "on configmap wd/wd)", None, "when the brake is released")
    assert p.paused_by is not None and decide(p, mode="dry-run").action == "dry_run"  # dry-run still reports
    p.set_brake(None)
    assert p.paused_by is None and decide(p).action == "delete"
    setting = policy(paused=True)
    setting.set_brake(None)  # releasing the brake never lifts the setting
    assert decide(setting) == Decision("defer", "paused", "the watchdog is paused (paused: true)", None,
                                       "when paused is set back to false")


@pytest.mark.parametrize(("annotations", "on"), [
    (None, False), ({}, False), ({PAUSE_ANNOTATION: "false"}, False), ({PAUSE_ANNOTATION: " False "}, False),
    ({PAUSE_ANNOTATION: ""}, False), ({PAUSE_ANNOTATION: "true"}, True), ({PAUSE_ANNOTATION: "TRUE"}, True),
    ({PAUSE_ANNOTATION: "yes"}, True), ({PAUSE_ANNOTATION: "1"}, True), ({"other/paused": "true"}, False),
])
def test_what_the_brake_annotation_means(annotations: dict[str, str] | None, on: bool) -> None:
    """A brake meant to hold never slips on a typo: anything but absent, empty or "false" holds."""
    config_map = {"metadata": {"name": "wd", "annotations": annotations}}
    assert brake_from(config_map)[0] is on
    assert brake_from(None) == (False, None)  # no such ConfigMap: nothing says pause


def test_the_view_shows_budget_breakers_deferrals_warm_up_and_the_pause() -> None:
    p = DeletionPolicy(rails(window_seconds=120, max_deletions=3, max_deletions_per_namespace=1), started=T0)
    assert p.view(T0)["warm_up"] == {"done": False, "left_s": 120.0}  # never listed pods yet
    p.begin_cycle(T0 + 10, watched=10, bad=0)
    p.record_deletion(T0 + 200, uid="u1", namespace="team-a", owner="team-a/ReplicaSet/x")
    p.record("u1", SERIES)  # the episode acted on (the remediator marks it)
    p.begin_cycle(T0 + 210, watched=10, bad=4, namespaces={"team-b": (3, 3), "team-c": (3, 0)})
    assert first_deferral(p, "u2", "breaker") and first_deferral(p, "u3", "breaker")
    assert first_deferral(p, "u2", "budget")
    p.set_brake("the brake")
    view = p.view(T0 + 250)
    assert view["warm_up"] == {"done": True, "left_s": 0.0}
    assert view["budget"] == {"known": True, "window_s": 600.0, "cluster": {"max": 3, "used": 1, "left": 2},
                              "namespace_max": 1, "namespaces": {"team-a": {"used": 1, "left": 0}},
                              "frees_in_s": {"cluster": None, "namespaces": {"team-a": 550.0}}}
    assert view["owners_waiting"] == ["team-a/ReplicaSet/x"]
    assert view["breaker"] == {"open": True, "why": "4 of 10 enforced pods looked stalled", "closes_in_s": 260.0,
                               "namespaces": {"team-b": {"closes_in_s": 260.0,
                                                         "why": "3 of its 3 watched pods looked stalled or unknown"}}}
    assert view["deferrals"] == {"breaker": 2, "budget": 1}
    assert (view["paused"], view["paused_why"]) == (True, "the brake")
    assert p.episodes(T0 + 250)("u2", SERIES) == (None, ["breaker", "budget"],
                                                  {"rule": "budget", "frees_in_s": None, "frees_when": ""})
    assert p.episodes(T0 + 250)("u1", SERIES) == ("delete", [], None)
    later = p.view(T0 + 900)  # the deletion left the window; the breakers closed
    assert later["budget"]["cluster"]["used"] == 0 and later["budget"]["namespaces"] == {}
    assert later["breaker"] == {"open": False, "why": None, "closes_in_s": None, "namespaces": {}}
    assert p.view(T0 + 900) == later  # a view changes nothing
