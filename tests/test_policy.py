"""The deletion policy: dry-run (global and per namespace) and one decision per stall episode. Pure."""

from __future__ import annotations

from watchdog.policy import REASON_DELETED, REASON_DRY_RUN, Decision, DeletionPolicy

SERIES = 'engine="0",model_name="m"'


def test_enforced_namespace_deletes() -> None:
    assert DeletionPolicy().decide("u1", SERIES, "enforce") == Decision("delete", "namespace is enforced")


def test_dry_run_namespace_only_reports() -> None:
    assert DeletionPolicy().decide("u1", SERIES, "dry-run") == Decision("dry_run", "namespace is labelled dry-run")


def test_unknown_namespace_mode_never_deletes() -> None:
    assert DeletionPolicy().decide("u1", SERIES, "").action == "dry_run"


def test_global_dry_run_overrides_an_enforced_namespace() -> None:
    policy = DeletionPolicy(global_dry_run=True)
    assert policy.decide("u1", SERIES, "enforce") == Decision("dry_run", "global dryRun is on")
    assert policy.decide("u1", SERIES, "dry-run").action == "dry_run"


def test_one_decision_per_episode() -> None:
    policy = DeletionPolicy()
    assert policy.decide("u1", SERIES, "enforce").action == "delete"
    policy.record("u1", SERIES)
    assert policy.decide("u1", SERIES, "enforce") == Decision("skip", "already acted on this stall episode")
    # Other series of the same pod and the same series of another pod are separate episodes.
    assert policy.decide("u1", 'engine="1",model_name="m"', "enforce").action == "delete"
    assert policy.decide("u2", SERIES, "enforce").action == "delete"
    policy.episode_over("u1", SERIES)
    assert policy.decide("u1", SERIES, "enforce").action == "delete"


def test_dry_run_announcement_is_also_once_per_episode() -> None:
    policy = DeletionPolicy(global_dry_run=True)
    assert policy.decide("u1", SERIES, "enforce").action == "dry_run"
    policy.record("u1", SERIES)
    assert policy.decide("u1", SERIES, "enforce").action == "skip"


def test_episode_over_for_an_unknown_episode_is_harmless() -> None:
    policy = DeletionPolicy()
    policy.episode_over("nobody", SERIES)
    assert policy.decide("nobody", SERIES, "enforce").action == "delete"


def test_forget_pods_drops_gone_pods_only() -> None:
    policy = DeletionPolicy()
    for uid in ("gone", "live"):
        policy.record(uid, SERIES)
    policy.forget_pods({"live"})
    assert policy.decide("gone", SERIES, "enforce").action == "delete"
    assert policy.decide("live", SERIES, "enforce").action == "skip"


def test_event_reasons() -> None:
    assert (REASON_DELETED, REASON_DRY_RUN) == ("StalledPodDeleted", "StalledPodDryRun")
