"""The one rule of a pod's effective policy (watchdog.core.podpolicy.policy_of): the global settings, a target's
own, and the pod's window annotation that may only lengthen the window, up to the ceiling."""

from __future__ import annotations

import pytest

from watchdog.core.model import PAUSE_ANNOTATION, WINDOW_ANNOTATION, Target
from watchdog.core.podpolicy import EffectivePolicy, paused_until, policy_of

BASE = EffectivePolicy(window_s=120.0, min_samples=3, action="delete", completion_only_window_s=0.0)
PLAIN = Target("plain", "app=a")
OWN = Target("own", "app=b", window_seconds=600.0, min_samples=5, action="evict",
             completion_only_window_seconds=900.0)


def test_without_its_own_a_target_has_the_global_policy() -> None:
    assert policy_of(BASE, PLAIN) == (BASE, "")
    assert policy_of(BASE, None) == (BASE, "")
    assert BASE.window_source == "global"


def test_a_target_sets_each_of_its_own() -> None:
    assert policy_of(BASE, OWN) == (EffectivePolicy(600.0, 5, "evict", 900.0, "target"), "")
    only_action = Target("a", "app=c", action="quarantine")
    assert policy_of(BASE, only_action)[0] == EffectivePolicy(120.0, 3, "quarantine", 0.0, "global")


@pytest.mark.parametrize(("value", "window"), [("300", 300.0), ("3600", 3600.0), (" 450.5 ", 450.5), ("120", 120.0)])
def test_an_annotation_lengthens_the_window_up_to_the_ceiling(value: str, window: float) -> None:
    policy, ignored = policy_of(BASE, PLAIN, value, 3600.0)
    assert (policy.window_s, policy.window_source, ignored) == (window, "annotation", "")
    assert (policy.min_samples, policy.action) == (3, "delete")


def test_a_lengthened_window_lengthens_a_shorter_completion_only_window_that_is_on() -> None:
    assert policy_of(BASE, OWN, "1200", 3600.0)[0].completion_only_window_s == 1200.0
    assert policy_of(BASE, OWN, "700", 3600.0)[0].completion_only_window_s == 900.0
    assert policy_of(BASE, PLAIN, "1200", 3600.0)[0].completion_only_window_s == 0.0  # off stays off


@pytest.mark.parametrize(("value", "why"), [
    ("60", "may only lengthen the pod's 600 s window, never shorten it"),
    ("7200", "above the ceiling maxPodWindowSeconds (3600 s)"),
    ("", "not a plain number"), ("abc", "not a plain number"), ("1e3", "not a plain number"),
    ("inf", "not a plain number"), ("nan", "not a plain number"), ("-900", "not a plain number"),
    ("0x300", "not a plain number"), ("900s", "not a plain number"), ("９００", "not a plain number"),
    ("9" * 17, "not a plain number"),
])
def test_a_shorter_malformed_or_too_high_annotation_is_ignored_with_why(value: str, why: str) -> None:
    policy, ignored = policy_of(BASE, OWN, value, 3600.0)
    assert policy == policy_of(BASE, OWN)[0]
    assert ignored.startswith(f"annotation {WINDOW_ANNOTATION}=") and why in ignored
    assert len(ignored) < 200  # a tenant's long value is cut in the message


def test_describe_and_as_dict_say_where_the_window_came_from() -> None:
    policy = policy_of(BASE, OWN)[0]
    assert policy.describe() == ("window 600 s (target), min samples 5, action evict, completion-only window 900 s")
    assert policy.as_dict()["window_source"] == "target"


# Issue 41 item 1: the pause annotation, judged at the caller's wall clock (core never reads one).
NOW = 1_764_972_000.0  # 2025-12-05T22:00:00Z


@pytest.mark.parametrize(("value", "until"), [
    ("2025-12-05T22:30:00Z", NOW + 1800), (" 2025-12-05T22:00:01Z ", NOW + 1),
    ("2025-12-05T23:30:00+01:00", NOW + 1800), ("2025-12-05T22:59:59.5Z", NOW + 3599.5),
    ("2025-12-05T23:00:00.000000000Z", NOW + 3600),  # exactly the ceiling is taken
])
def test_a_pause_annotation_holds_until_its_time_up_to_the_ceiling(value: str, until: float) -> None:
    assert paused_until(value, NOW, 3600.0) == (until, "")


@pytest.mark.parametrize("value", ["2025-12-05T22:00:00Z", "2025-12-05T21:00:00Z", "2000-01-01T00:00:00Z"])
def test_a_pause_annotation_in_the_past_holds_nothing_and_is_no_warning(value: str) -> None:
    assert paused_until(value, NOW, 3600.0) == (None, "")


def test_no_pause_annotation_holds_nothing() -> None:
    assert paused_until(None, NOW, 3600.0) == (None, "")


@pytest.mark.parametrize(("value", "why"), [
    ("2025-12-05T23:00:01Z", "3601 s ahead, above the ceiling maxPodPauseSeconds (3600 s)"),
    ("2099-01-01T00:00:00Z", "above the ceiling maxPodPauseSeconds"),
    ("", "not an RFC 3339 time"), ("true", "not an RFC 3339 time"), ("1764975600", "not an RFC 3339 time"),
    ("2025-12-05 22:30:00Z", "not an RFC 3339 time"), ("2025-12-05T22:30:00", "not an RFC 3339 time"),
    ("2025-12-05t22:30:00z", "not an RFC 3339 time"), ("2025-13-05T22:30:00Z", "not an RFC 3339 time"),
    ("2025-12-05T25:30:00Z", "not an RFC 3339 time"), ("2025-12-05T22:30:00+99:00", "not an RFC 3339 time"),
    ("２０２５-12-05T22:30:00Z", "not an RFC 3339 time"), ("2025-12-05T22:30:00." + "0" * 40 + "Z", "RFC 3339"),
])
def test_a_malformed_or_too_distant_pause_annotation_is_ignored_with_why(value: str, why: str) -> None:
    until, ignored = paused_until(value, NOW, 3600.0)
    assert until is None
    assert ignored.startswith(f"annotation {PAUSE_ANNOTATION}=") and why in ignored
    assert len(ignored) < 200  # a tenant's long value is cut in the message
