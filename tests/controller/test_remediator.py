"""The deletion choke point against the Kubernetes API emulator over real HTTP (kmock-based; not a cluster)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
from collections.abc import Callable
from typing import Any

import builders
import pytest
from builders import BASE
from fakes import FakeClock, FakeKube
from metricsum import summed
from remediator_kit import (
    NS,
    SIGNALS,
    SNAP,
    VERDICT,
    WALL,
    Rescrape,
    api,
    open_policy,
    remediate,
    target_of,
)

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.adapters.metrics import Metrics, new_metrics
from watchdog.controller.actuator import Actuator
from watchdog.controller.ledger import DeletionLedger
from watchdog.controller.remediator import Remediation, Remediator
from watchdog.core.confirm import not_confirmed
from watchdog.core.discovery import discover
from watchdog.core.events import MAX_MESSAGE, event_body
from watchdog.core.model import Target
from watchdog.core.parsing import EngineSnapshot
from watchdog.core.vocab import REMEDIATION_RESULTS, StallAction
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import pod_manifest, seed_deployment, seed_statefulset

__all__ = ["api"]  # the fixture, shared with test_evidence.py through remediator_kit.py


def vary(base: EngineSnapshot = SNAP, **changes: float | None) -> EngineSnapshot:
    """``base`` with fields replaced; ``generation_tokens``/``prompt_tokens``/``heartbeat`` name progress values."""
    progress = list(base.progress)
    for index, selector in enumerate(SIGNALS):
        if selector.metric in changes:
            progress[index] = changes.pop(selector.metric)
    return dataclasses.replace(base, progress=tuple(progress), **changes)  # type: ignore[arg-type]


def gen(snap: EngineSnapshot) -> float:
    return snap.progress[0] or 0.0


def prompt(snap: EngineSnapshot) -> float:
    return snap.progress[1] or 0.0


def beat(snap: EngineSnapshot) -> float:
    return snap.progress[2] or 0.0
#: What every Event message about VERDICT says after "<what> pod NS/NAME": the facts, in the on-call order.
FACTS = (f' engine {{{SNAP.key}}}: no progress for 130 s, 21 requests running (0 waiting), frozen '
         "generation_tokens=456789 prompt_tokens=1234567 heartbeat=30200 since ")


def results(m: Metrics) -> dict[str, float]:
    out = {r: summed(m.registry, "vllm_watchdog_remediations_total", {"result": r})
           for r in REMEDIATION_RESULTS}
    return {r: v for r, v in out.items() if v}


def remediator(kube: Any, rescrape: Rescrape | None = None, *, require_controller: bool = True,
               **kw: Any) -> tuple[Remediator, Metrics]:
    metrics = new_metrics()
    return builders.remediator(kube, open_policy(**kw), rescrape or Rescrape(), metrics,
                      require_controller=require_controller), metrics


def events(api: EmulatorServer, namespace: str = NS) -> list[tuple[str, str, str]]:
    return sorted((e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
                  for e in api.list_events(namespace))


def pod_path(pod: dict[str, Any]) -> str:
    return f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"


def recreate(api: EmulatorServer, pod: dict[str, Any]) -> dict[str, Any]:
    """Delete ``pod`` and create a new pod with the same name, IP and owner (a new UID)."""
    status, _ = api.request("DELETE", pod_path(pod))
    assert status == 200
    fresh = {k: v for k, v in pod.items() if k != "metadata"}
    fresh["metadata"] = {k: v for k, v in pod["metadata"].items()
                         if k in ("name", "namespace", "labels", "annotations", "ownerReferences")}
    created = api.create_pod(fresh)
    assert created["metadata"]["uid"] != pod["metadata"]["uid"]
    return created


# -- deletion ----------------------------------------------------------------------------------------------------
def test_deletes_with_events_on_pod_and_deployment(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    pod, target = seeded["pod"], target_of(api, seeded["pod"])
    rescrape = Rescrape()
    rem, metrics = remediator(kube_client, rescrape)
    before = len(api.emulator.request_log)

    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)

    assert outcome.result == "deleted"
    assert target.uid in outcome.detail and target.ref in outcome.detail
    assert api.get_pod(NS, pod["metadata"]["name"]) is None
    assert rescrape.calls == 1
    log = api.emulator.request_log[before:]
    assert [(r.verb, r.resource) for r in log if r.verb == "delete"] == [("delete", "pods")]
    assert [r.verb for r in log if r.resource == "pods"] == ["get", "delete"]  # fresh GET, then the DELETE
    assert events(api) == [("StalledPodDeleted", "Deployment", "llama"),
                           ("StalledPodDeleted", "Pod", pod["metadata"]["name"])]
    by_kind = {e["involvedObject"]["kind"]: e for e in api.list_events(NS)}
    pod_event = by_kind["Pod"]
    assert pod_event["involvedObject"]["uid"] == target.uid
    assert by_kind["Deployment"]["involvedObject"]["uid"] == seeded["deployment"]["metadata"]["uid"]
    assert pod_event["type"] == "Warning" and pod_event["action"] == "Delete"
    assert pod_event["source"] == {"component": "vllm-stall-watchdog"}
    message = pod_event["message"]
    assert message == by_kind["Deployment"]["message"]
    assert message.startswith(f"Deleted pod {target.ref}{FACTS}")
    assert re.search(r"\. Why: stalled past the 120 s window \(global\) over 9 busy samples\. evidence: "
                     rf"{target.uid[:8]}-\d{{10}} in the watchdog log\.$", message), message  # the pointer, last
    assert VERDICT.reason not in message  # the detector's sentence is for logs; the Event is composed from facts
    assert results(metrics) == {"deleted": 1.0}
    # The same episode is never acted on twice.
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).result == "skip"
    assert results(metrics) == {"deleted": 1.0}


def test_statefulset_pod_gets_its_event_on_the_statefulset(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_statefulset(api, NS, "big", "10.0.0.6", 8000)
    rem, _ = remediator(kube_client)
    assert remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS).result == "deleted"
    assert events(api) == [("StalledPodDeleted", "Pod", "big-0"), ("StalledPodDeleted", "StatefulSet", "big")]


def test_bare_pod_gets_one_event(api: EmulatorServer, kube_client: KubeClient) -> None:
    api.create_pod(pod_manifest(NS, "bare", "10.0.0.7", 8000))
    stored = api.get_pod(NS, "bare")
    assert stored is not None
    [target] = discover(api.list_objects("/api/v1/namespaces"), [(Target("vllm", "x=y"), [stored])],
                        require_controller=False, base=BASE).targets
    rem, _ = remediator(kube_client, require_controller=False)
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).result == "deleted"
    assert events(api) == [("StalledPodDeleted", "Pod", "bare")]


def test_event_message_is_cut_to_1_kib_keeping_its_head(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    # A progress signal with a 3,000-character name (2-byte characters: the cut must stay valid UTF-8).
    long = dataclasses.replace(VERDICT, frozen=(("é" * 3000, 1.0),))
    rem, _ = remediator(kube_client)
    target = target_of(api, seeded["pod"])
    assert remediate(rem, target, SNAP, long, signals=SIGNALS).result == "deleted"
    messages = [e["message"] for e in api.list_events(NS)]
    assert len(messages) == 2
    for message in messages:
        assert MAX_MESSAGE - 4 <= len(message.encode()) <= MAX_MESSAGE
        assert message.startswith(f"Deleted pod {target.ref} engine {{{SNAP.key}}}: no progress for 130 s, 21 ")
        assert message.endswith("é...")


def test_event_body_keeps_short_messages() -> None:
    body = event_body("ml", {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}, "StalledPodDryRun",
                      "x" * MAX_MESSAGE, "host", dt.datetime(2026, 12, 1, 3, 4, 5, tzinfo=dt.UTC))
    assert body["message"] == "x" * MAX_MESSAGE and body["action"] == "None"
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-12-01T03:04:05Z"
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "namespace": "ml"}
    assert body["metadata"] == {"generateName": "p.", "namespace": "ml"}


def test_action_quarantine_removes_nothing_at_the_choke_point(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    target, rescrape = target_of(api, seeded["pod"]), Rescrape()
    rem = builders.remediator(kube_client, open_policy(), rescrape, new_metrics())
    before = len(api.emulator.request_log)
    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS, action="quarantine")
    assert (outcome.result, rescrape.calls) == ("skip", 0)  # not even the confirmation scrape
    assert api.get_pod(NS, seeded["pod"]["metadata"]["name"]) is not None
    assert api.emulator.request_log[before:] == []  # no API request at all: no delete, no eviction, no Event


# -- dry-run -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("namespace", "dry_run"), [(NS, True), ("obs", False)])
def test_dry_run_writes_events_and_deletes_nothing(api: EmulatorServer, kube_client: KubeClient, namespace: str,
                                                   dry_run: bool) -> None:
    seeded = seed_deployment(api, namespace, "llama", "10.0.0.5", 8000)
    rescrape = Rescrape()
    rem, metrics = remediator(kube_client, rescrape, dry_run=dry_run)
    target = target_of(api, seeded["pod"])
    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "dry_run"
    assert api.get_pod(namespace, seeded["pod"]["metadata"]["name"]) is not None
    assert api.emulator.count_requests(verb="delete") == 0
    assert rescrape.calls == 0
    assert events(api, namespace) == [("StalledPodDryRun", "Deployment", "llama"),
                                      ("StalledPodDryRun", "Pod", seeded["pod"]["metadata"]["name"])]
    why = "global dryRun is on" if dry_run else "namespace is labelled dry-run"
    assert [e["message"].startswith(f"Would delete pod {target.ref}{FACTS}") for e in api.list_events(namespace)] \
        == [True, True]
    assert all(re.search(rf"; dry-run, {why}\. evidence: {target.uid[:8]}-\d{{10}} in the watchdog log\.$",
                         e["message"]) for e in api.list_events(namespace))
    assert results(metrics) == {"dry_run": 1.0}
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).result == "skip"  # announced once per episode
    assert len(api.list_events(namespace)) == 2


# -- aborts before the delete ------------------------------------------------------------------------------------
def _gone(api: EmulatorServer, pod: dict[str, Any]) -> None:
    assert api.request("DELETE", pod_path(pod))[0] == 200


def _recreated(api: EmulatorServer, pod: dict[str, Any]) -> None:
    recreate(api, pod)


def _new_ip(api: EmulatorServer, pod: dict[str, Any]) -> None:
    api.patch_object(pod_path(pod), {"status": {"podIP": "10.9.9.9"}})


def _failed(api: EmulatorServer, pod: dict[str, Any]) -> None:
    api.patch_object(pod_path(pod), {"status": {"phase": "Failed"}})


def _excluded(api: EmulatorServer, pod: dict[str, Any]) -> None:
    api.patch_object(pod_path(pod), {"metadata": {"annotations": {"vllm-watchdog.io/exclude": "true"}}})


def _namespace_to_dry_run(api: EmulatorServer, pod: dict[str, Any]) -> None:
    api.patch_object(f"/api/v1/namespaces/{NS}", {"metadata": {"labels": {"vllm-watchdog.io/enabled": "dry-run"}}})


def _namespace_opted_out(api: EmulatorServer, pod: dict[str, Any]) -> None:
    api.patch_object(f"/api/v1/namespaces/{NS}", {"metadata": {"labels": {"vllm-watchdog.io/enabled": None}}})


def _restarted(api: EmulatorServer, pod: dict[str, Any]) -> None:
    statuses = [{**c, "restartCount": 1} for c in pod["status"].get("containerStatuses") or [{"name": "vllm"}]]
    api.patch_object(pod_path(pod), {"status": {"containerStatuses": statuses}})


@pytest.mark.parametrize(("change", "why"), [
    (_gone, "pod is gone"), (_recreated, "a new pod under the same name"),
    (_new_ip, "pod IP is now 10.9.9.9"), (_failed, "skips it: not_running"),
    (_excluded, "skips it: excluded"), (_namespace_to_dry_run, "namespace mode is now dry-run"),
    (_namespace_opted_out, "skips it: namespace_not_enabled"), (_restarted, "a container restarted"),
])
def test_aborts_when_the_pod_changed(api: EmulatorServer, kube_client: KubeClient,
                                     change: Callable[[EmulatorServer, dict[str, Any]], None], why: str) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    target = target_of(api, seeded["pod"])
    change(api, seeded["pod"])
    rescrape = Rescrape()
    rem, metrics = remediator(kube_client, rescrape)
    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "aborted"
    assert why in outcome.detail
    assert rescrape.calls == 0
    assert api.emulator.count_requests(verb="delete") == 0
    assert api.list_events(NS) == []
    assert results(metrics) == {"aborted": 1.0}
    if change is not _gone:
        assert api.get_pod(NS, seeded["pod"]["metadata"]["name"]) is not None


@pytest.mark.parametrize(("now", "why"), [
    (None, "gave no evidence"),
    (dataclasses.replace(SNAP, running=None), "gave no evidence"),
    (dataclasses.replace(SNAP, running=float("nan")), "gave no evidence"),
    (vary(generation_tokens=None, prompt_tokens=None, heartbeat=None), "gave no evidence"),
    (vary(generation_tokens=gen(SNAP) + 1), "generation_tokens moved"),
    (vary(prompt_tokens=prompt(SNAP) + 5), "prompt_tokens moved"),
    (vary(heartbeat=beat(SNAP) + 1), "heartbeat moved"),
    (vary(paused=1.0), "engine paused or sleeping"),
    (dataclasses.replace(SNAP, running=0.0), "engine went idle"),
])
def test_aborts_when_the_rescrape_does_not_confirm(api: EmulatorServer, kube_client: KubeClient,
                                                   now: EngineSnapshot | None, why: str) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    rescrape = Rescrape(now)
    rem, metrics = remediator(kube_client, rescrape)
    target = target_of(api, seeded["pod"])
    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
    assert (outcome.result, rescrape.calls) == ("aborted", 1)
    assert why in outcome.detail
    assert api.get_pod(NS, seeded["pod"]["metadata"]["name"]) is not None
    assert api.emulator.count_requests(verb="delete") == 0
    assert api.list_events(NS) == []
    assert results(metrics) == {"aborted": 1.0}
    # Not recorded as acted on: the next cycle decides again.
    assert rem.policy.decide(uid=target.uid, series=SNAP.key, namespace=NS, namespace_mode="enforce", owner=None,
                             pod_age_s=1e6, now=1e9).action == "delete"


def test_aborts_when_the_fresh_get_shows_the_pod_terminating(api: EmulatorServer,
                                                            kube_client: KubeClient) -> None:
    # kmock treats an object with deletionTimestamp as deleted, so the terminating pod comes from a wrapper.
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def terminating(namespace: str, name: str) -> dict[str, Any] | None:
        pod = kube_client.get_pod(namespace, name)
        assert pod is not None
        pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        return pod

    kube = FakeKube(kube_client, get_pod=terminating, delete_pod=kube_client.delete_pod)
    rescrape = Rescrape()
    rem, metrics = remediator(kube, rescrape)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "aborted" and "skips it: terminating" in outcome.detail
    assert (kube.calls, rescrape.calls) == ({"get_pod": 1, "delete_pod": 0}, 0)
    assert results(metrics) == {"aborted": 1.0}


def test_confirmation_ignores_missing_counters() -> None:
    assert not_confirmed(SNAP, SNAP, False) is None
    assert not_confirmed(SNAP, vary(heartbeat=None, waiting=7.0), False, SIGNALS) is None


@pytest.mark.parametrize("bad", [float("nan"), -1.0, None, float("inf")])
def test_confirmation_reads_a_nan_negative_or_missing_counter_as_the_detector_does(bad: float | None) -> None:
    """The detector ignores a NaN/negative/missing counter and judges the others frozen: the confirmation
    re-scrape must agree, not read nan != nan as "moved" and spare the wedge forever (the layout issue's bug)."""
    before = vary(heartbeat=bad)
    assert not_confirmed(before, vary(heartbeat=bad), False, SIGNALS) is None
    assert not_confirmed(before, vary(heartbeat=None), False, SIGNALS) is None
    moved = not_confirmed(before, vary(heartbeat=bad, prompt_tokens=prompt(SNAP) + 1), False, SIGNALS)
    assert moved is not None and moved.startswith("prompt_tokens moved")


def test_a_wedge_with_one_nan_counter_is_deleted(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    nan = vary(heartbeat=float("nan"))
    rem, metrics = remediator(kube_client, Rescrape(dataclasses.replace(nan)))
    outcome = remediate(rem, target_of(api, seeded["pod"]), nan, VERDICT, signals=SIGNALS)
    assert outcome.result == "deleted", outcome.detail
    assert summed(metrics.registry, "vllm_watchdog_remediations_total", {"result": "deleted"}) == 1
    assert api.get_pod(NS, seeded["pod"]["metadata"]["name"]) is None


# -- what the API says at delete time -----------------------------------------------------------------------------
def test_pod_recreated_between_get_and_delete_is_a_conflict(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    target = target_of(api, seeded["pod"])
    new: list[dict[str, Any]] = []
    rescrape = Rescrape(before=lambda: new.append(recreate(api, seeded["pod"])))
    rem, metrics = remediator(kube_client, rescrape)
    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "conflict"
    assert "UID precondition failed" in outcome.detail
    survivor = api.get_pod(NS, seeded["pod"]["metadata"]["name"])
    assert survivor is not None and survivor["metadata"]["uid"] == new[0]["metadata"]["uid"]
    assert api.emulator.count_requests(verb="delete") == 1
    assert api.list_events(NS) == []
    assert results(metrics) == {"conflict": 1.0}


def test_pod_gone_between_get_and_delete_is_not_found(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    rescrape = Rescrape(before=lambda: _gone(api, seeded["pod"]))
    rem, metrics = remediator(kube_client, rescrape)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "not_found" and "already gone" in outcome.detail
    assert api.list_events(NS) == []
    assert results(metrics) == {"not_found": 1.0}


def _second_stall(api: EmulatorServer, rem: Remediator, action: StallAction = "delete") -> Remediation:
    """Another stalled pod of another owner in the same namespace, decided right after."""
    other = seed_deployment(api, NS, "other", "10.0.0.8", 8000)
    return remediate(rem, target_of(api, other["pod"]), SNAP, VERDICT, signals=SIGNALS, action=action)


@pytest.mark.parametrize("action", ["delete", "evict"])
@pytest.mark.parametrize(("status", "applied", "result"), [
    (0, True, "deleted"),     # read timeout: the server applied it, the answer was lost
    (504, True, "deleted"),   # 5xx after it was applied ("may still be processing")
    (500, False, "error"),    # 5xx without applying it: still charged (fail closed)
    (0, False, "error"),      # no answer, nothing applied: still charged
])
def test_a_lost_answer_is_charged_and_resolved(api: EmulatorServer, kube_client: KubeClient, action: StallAction,
                                               status: int, applied: bool, result: str) -> None:
    """Issue 11 item 1: a DELETE/evict whose answer is lost must charge the budgets before anything else, so
    the next stalled pod is not "allowed" in the same cycle, and be resolved by a GET (gone or terminating
    with our UID = deleted, with its Events)."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    name = seeded["pod"]["metadata"]["name"]
    verb = "evict_pod" if action == "evict" else "delete_pod"

    def lost(namespace: str, pod: str, uid: str, grace: int | None) -> Any:
        if applied:
            kube_client.delete_pod(namespace, pod, uid, grace)
        raise KubeError(f"{action} pod", status, "Gateway Timeout" if status else "ReadTimeoutError: timed out")

    kube = FakeKube(kube_client, **{verb: lost})
    metrics = new_metrics()
    rem = builders.remediator(kube, open_policy(max_deletions=5, max_deletions_per_namespace=1), Rescrape(), metrics)
    target = target_of(api, seeded["pod"])
    outcome = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS, action=action)
    done = "evicted" if action == "evict" and result == "deleted" else result
    assert outcome.result == done, outcome.detail
    # Counted as the budget counts it: one removal by this action, whatever the GET showed afterwards.
    assert summed(metrics.registry, "vllm_watchdog_deletions_total", {"action": action}) == 1.0
    assert results(metrics) == {done: 1.0}
    assert kube.calls[verb] == 1
    assert (api.get_pod(NS, name) is None) is applied
    reasons = [e["reason"] for e in api.list_events(NS)]
    assert reasons == (["StalledPodDeleted", "StalledPodDeleted"] if applied else [])
    if not applied:
        assert "charged to the budgets" in outcome.detail
    second = _second_stall(api, rem, action)  # the namespace budget (1) is used by the ambiguous attempt
    assert (second.result, "namespace budget used" in second.detail) == ("deferred", True)
    if applied:  # the episode was acted on: no second DELETE for the same stall
        assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS, action=action).result == "skip"
        assert kube.calls[verb] == 1
        return
    # Issue 27 item 14: charged but not applied (the pod is still there): sent again on the next cycle that still
    # finds the stall, with the same UID precondition, never charged twice.
    del kube.overrides[verb]
    again = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS, action=action)
    assert again.result == ("evicted" if action == "evict" else "deleted"), again.detail
    assert "sent again after a lost answer" in again.detail and api.get_pod(NS, name) is None
    assert summed(metrics.registry, "vllm_watchdog_deletions_total", {"action": action}) == 1.0
    assert [e["involvedObject"]["name"] for e in api.list_events(NS) if e["reason"] == "StalledPodDeleted"] == [
        name, "llama"]  # the pod and its Deployment, once
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS, action=action).result == "skip"


@pytest.mark.parametrize("seen", ["terminating", "gone"])
def test_a_lost_removal_applied_later_is_reported_once(api: EmulatorServer, kube_client: KubeClient,
                                                       seen: str) -> None:
    """The DELETE's answer was lost and the GET after it failed too; the API server applied it later. The next
    cycle sees the pod terminating (a retry finds it so) or no longer listed (settle_gone): StalledPodDeleted
    once, never a second DELETE, charged once (fault-tier finding: the deleted pod had no Event at all)."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    name, uid = seeded["pod"]["metadata"]["name"], seeded["pod"]["metadata"]["uid"]

    frozen = [False]

    def lost(*args: Any) -> Any:
        frozen[0] = True  # the API server stops answering right after this request
        raise KubeError("delete pod", 0, "ReadTimeoutError: timed out")

    def get_pod(namespace: str, pod: str) -> Any:
        if frozen[0]:
            raise KubeError("get pod", 0, "ReadTimeoutError: timed out")
        return kube_client.get_pod(namespace, pod)

    kube = FakeKube(kube_client, delete_pod=lost, get_pod=get_pod)
    metrics = new_metrics()
    rem = builders.remediator(kube, open_policy(), Rescrape(), metrics)
    target = target_of(api, seeded["pod"])
    first = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
    assert first.result == "error" and "sent again next cycle" in first.detail
    # Issue 38: what is kept across cycles for it is data (the stall and the verb), never a closure.
    assert all(not callable(part) for kept in rem.policy.unsettled.values() for part in kept)
    frozen[0] = False
    assert [e["reason"] for e in api.list_events(NS)] == []
    if seen == "terminating":
        api.patch_object(pod_path(seeded["pod"]), {"metadata": {"deletionTimestamp": "2026-12-03T16:00:00Z"}})
        again = remediate(rem, target, SNAP, VERDICT, signals=SIGNALS)
        assert again.result == "deleted" and "answer was lost" in again.detail
    else:
        kube_client.delete_pod(NS, name, uid, None)
        rem.settle_gone(set())
    assert kube.calls["delete_pod"] == 1
    assert sorted(e["involvedObject"]["kind"] for e in api.list_events(NS)) == ["Deployment", "Pod"]
    assert summed(metrics.registry, "vllm_watchdog_deletions_total", {"action": "delete"}) == 1.0
    rem.settle_gone(set())  # once only
    assert len(api.list_events(NS)) == 2


def test_a_lost_removal_whose_pod_is_merely_no_longer_watched_is_not_reported(api: EmulatorServer,
                                                                               kube_client: KubeClient) -> None:
    """Fresh-eyes finding: after a lost answer the tenant annotated its pod excluded; the pod dropped out of the
    watched set and was reported deleted (Events, node escalation) while it still ran."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def unapplied(*args: Any) -> Any:
        raise KubeError("delete pod", 500, "Internal Server Error")

    kube = FakeKube(kube_client, delete_pod=unapplied)
    rem = builders.remediator(kube, open_policy(), Rescrape(), new_metrics())
    assert remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS).result == "error"
    rem.settle_gone(set())  # excluded: no longer watched, still there
    rem.settle_gone(set())
    assert api.list_events(NS) == [] and kube.calls["delete_pod"] == 1


def test_a_lost_removal_is_not_ours_to_report_once_its_stall_episode_ended(api: EmulatorServer,
                                                                            kube_client: KubeClient) -> None:
    """Issue 38 item 5: the DELETE's answer was lost and the pod stayed; then its engine recovered (the episode
    ended). A later removal of the pod (a rollout, an operator) is someone else's: no StalledPodDeleted, no node
    escalation."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    name, uid = seeded["pod"]["metadata"]["name"], seeded["pod"]["metadata"]["uid"]

    def unapplied(*args: Any) -> Any:
        raise KubeError("delete pod", 500, "Internal Server Error")

    kube = FakeKube(kube_client, delete_pod=unapplied)
    rem = builders.remediator(kube, open_policy(), Rescrape(), new_metrics())
    assert remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS).result == "error"
    rem.policy.episode_over(uid, SNAP.key)  # the engine was seen progressing again
    kube_client.delete_pod(NS, name, uid, None)  # someone else removes it
    rem.settle_gone(set())
    assert api.list_events(NS) == [] and rem.policy.unsettled == {}


def test_a_refused_delete_is_not_charged(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def forbidden(*args: Any) -> Any:
        raise KubeError("delete pod", 403, "Forbidden", "pods is forbidden")

    kube = FakeKube(kube_client, delete_pod=forbidden)
    metrics = new_metrics()
    rem = builders.remediator(kube, open_policy(max_deletions=5, max_deletions_per_namespace=1), Rescrape(), metrics)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "error" and "refused, not retried" in outcome.detail
    assert api.list_events(NS) == []
    assert _second_stall(api, rem).result == "error"  # not deferred: nothing was charged
    assert not summed(metrics.registry, "vllm_watchdog_deletions_total", {"action": "delete"})
    assert results(metrics) == {"error": 2.0}


@pytest.mark.parametrize(("status", "result"), [(503, "aborted"), (0, "aborted"), (401, "error"), (403, "error")])
def test_fresh_get_failure_aborts(api: EmulatorServer, kube_client: KubeClient, status: int, result: str) -> None:
    """A refused fresh GET (revoked token, lost RBAC) is an error the alerts see, not a quiet abort (item 15)."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def boom(*args: Any) -> Any:
        raise KubeError("get pod", status, "refused")

    kube = FakeKube(kube_client, get_pod=boom, delete_pod=kube_client.delete_pod)
    rem, _ = remediator(kube)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == result and "fresh GET failed" in outcome.detail
    assert kube.calls["delete_pod"] == 0


def test_event_failures_never_block_the_delete(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def boom(*args: Any) -> Any:
        raise KubeError("create event", 403, "Forbidden")

    kube = FakeKube(kube_client, create_event=boom)
    rem, metrics = remediator(kube)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "deleted"
    assert api.get_pod(NS, seeded["pod"]["metadata"]["name"]) is None
    assert kube.calls["create_event"] == 2  # pod and Deployment, each tried once
    assert metrics.registry.get_sample_value("vllm_watchdog_event_failures_total") == 2.0
    assert results(metrics) == {"deleted": 1.0}


def test_any_exception_from_events_or_the_owner_walk_is_contained(api: EmulatorServer,
                                                                   kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def boom(*args: Any) -> Any:
        raise RuntimeError("unexpected")

    kube = FakeKube(kube_client, create_event=boom, get_object=boom)
    rem, metrics = remediator(kube)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert outcome.result == "deleted"
    assert kube.calls["create_event"] == 1  # the owner walk failed: only the pod's Event was tried
    assert metrics.registry.get_sample_value("vllm_watchdog_event_failures_total") == 1.0


def test_owner_walk_stops_at_a_missing_owner(api: EmulatorServer, kube_client: KubeClient) -> None:
    """A ReplicaSet that is gone cannot be verified (issue 27 item 11): only the pod gets its Event."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    rs = seeded["replicaset"]["metadata"]["name"]
    assert api.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/replicasets/{rs}")[0] == 200
    rem, _ = remediator(kube_client)
    assert remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS).result == "deleted"
    assert events(api) == [("StalledPodDeleted", "Pod", seeded["pod"]["metadata"]["name"])]


def test_configured_grace_period_is_sent(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    sent: list[tuple[Any, ...]] = []

    def spy(*args: Any) -> Any:
        sent.append(args)
        return kube_client.delete_pod(*args)

    kube = FakeKube(kube_client, delete_pod=spy)
    rem = builders.remediator(kube, open_policy(), Rescrape(), new_metrics(), grace_period_s=7)
    target = target_of(api, seeded["pod"])
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).result == "deleted"
    assert sent == [(NS, target.name, target.uid, 7)]


@pytest.mark.parametrize(("count_waiting", "result"), [(True, "deleted"), (False, "aborted")])
def test_waiting_requests_keep_the_engine_busy_with_count_waiting(api: EmulatorServer, kube_client: KubeClient,
                                                                  count_waiting: bool, result: str) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    queued = dataclasses.replace(SNAP, running=0.0, waiting=5.0)
    rem = builders.remediator(kube_client, open_policy(), Rescrape(queued), new_metrics())
    outcome = remediate(rem, target_of(api, seeded["pod"]), queued, VERDICT, signals=SIGNALS,
                        count_waiting=count_waiting)
    assert outcome.result == result
    if result == "aborted":
        assert "engine went idle" in outcome.detail


def test_progressed_reads_values_as_the_detector_does() -> None:
    idle = dataclasses.replace(SNAP, running=0.0, waiting=float("nan"))
    assert not_confirmed(SNAP, idle, True) == "engine went idle"
    assert not_confirmed(SNAP, dataclasses.replace(SNAP, running=0.0, waiting=2.0), True) is None
    assert not_confirmed(SNAP, dataclasses.replace(SNAP, running=0.0, waiting=2.0), False) == "engine went idle"


def test_an_eviction_says_evicted_in_its_events_and_result(api: EmulatorServer, kube_client: KubeClient) -> None:
    """The real API server tier caught "evictd:" in the Event message (the verb + "d")."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    rem = builders.remediator(kube_client, open_policy(), Rescrape(), new_metrics())
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS, action="evict")
    assert outcome.result == "evicted" and outcome.detail.startswith("evicted ")
    messages = [e["message"] for e in api.list_events(NS)]
    ref = outcome.detail.split()[1]
    assert len(messages) == 2 and all(m.startswith(f"Evicted pod {ref}{FACTS}") for m in messages), messages


def test_a_pod_under_several_pdbs_is_deferred_with_the_reason(api: EmulatorServer, kube_client: KubeClient) -> None:
    """The real API server answers 500 for a pod selected by two PodDisruptionBudgets: that is a refusal (nothing
    applied), so it is a `pdb` deferral with an Event that says why — not a lost answer charged to the budget."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    api.emulator.several_pdbs = {f"{NS}/{seeded['pod']['metadata']['name']}"}
    metrics = new_metrics()
    rem = builders.remediator(kube_client, open_policy(max_deletions=5, max_deletions_per_namespace=1), Rescrape(),
                              metrics)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS, action="evict")
    assert outcome.result == "deferred" and "more than one PodDisruptionBudget" in outcome.detail
    assert summed(metrics.registry, "vllm_watchdog_deferrals_total", {"rule": "pdb"}) == 1
    messages = [e["message"] for e in api.list_events(NS) if e["reason"] == "StalledPodDeletionDeferred"]
    assert len(messages) == 2 and all("overlapping PDBs" in m for m in messages)
    assert all("; may proceed in 15 s (at " in m and  # the backoff: one cycle interval after the first refusal
               "when the Eviction API allows it (tried again after a backoff). evidence: " in m for m in messages)
    assert _second_stall(api, rem, "evict").result == "evicted"  # nothing was charged


def test_a_node_owned_static_pod_gets_only_its_pod_event(api: EmulatorServer, kube_client: KubeClient) -> None:
    """A static pod's mirror is owned by its Node (cluster-scoped). Anyone who may create pods can claim such an
    owner, so the watchdog neither reads the Node nor writes an owner Event (in "default" or anywhere): the Pod
    gets its Event (issue 27 item 11)."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "uid": "node-uid"}}
    api.create_pod(pod_manifest(NS, "static-gpu-1", "10.0.0.9", 8000, owner=node))
    stored = api.get_pod(NS, "static-gpu-1")
    assert stored is not None
    [target] = discover(api.list_objects("/api/v1/namespaces"), [(Target("vllm", "x=y"), [stored])], base=BASE).targets
    rem, _ = remediator(kube_client)
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).result == "deleted"
    assert events(api) == [("StalledPodDeleted", "Pod", "static-gpu-1")]
    assert api.list_events("default") == []
    assert not [r for r in api.emulator.request_log if r.resource == "nodes"]


def ledger_rig(api: EmulatorServer, kube: FakeKube) -> tuple[Remediator, DeletionLedger]:
    api.create_namespace("watchdog")
    actuator = builders.actuator(kube)
    led = actuator.ledger = DeletionLedger(kube, actuator, "watchdog", "wd-ledger", 600.0, lambda: 1_000.0)
    return builders.remediator(kube, open_policy(), Rescrape(), new_metrics(), actuator=actuator), led


def test_no_removal_while_the_ledger_cannot_be_written(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Issue 27 item 2: a 503 on the ledger write: nothing is removed (rule ledger), so a restart can never read a
    budget that misses a removal."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    kube = FakeKube(kube_client, delete_pod=lambda *a: "deleted")
    kube.fail["create_config_map"] = KubeError("create configmap", 503, "Service Unavailable")
    rem, _ = ledger_rig(api, kube)
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert (outcome.result, outcome.rule) == ("deferred", "ledger")
    assert outcome.detail.endswith("; may proceed once the deletion ledger can be written (tried every cycle)")
    assert kube.calls["delete_pod"] == 0


def test_the_fence_is_checked_after_the_slow_log_read(api: EmulatorServer, kube_client: KubeClient) -> None:
    """Issue 27 item 3: the evidence log read took 10 s, meanwhile the Lease could pass to another replica; the
    DELETE must not be sent. The fence (Lease valid for longer than a write's timeout) is asked right before it."""
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    clock = FakeClock(1000.0)
    lease_end = clock.now + 14.0  # renewed a second ago, 15 s Lease

    def slow_log(*args: Any) -> bytes:
        clock.advance(10.0)
        return b"a line\n"

    kube = FakeKube(kube_client, read_pod_log=slow_log, delete_pod=lambda *a: "deleted")
    actuator = Actuator(kube, fence=lambda s: clock() + s < lease_end, write_timeout_s=10.0)
    rem = builders.remediator(kube, open_policy(), Rescrape(), new_metrics(), actuator=actuator, clock=clock,
                     evidence=builders.evidence_keeper(actuator, log_lines=5, clock=clock))
    outcome = remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    assert kube.calls["read_pod_log"] == 1
    assert kube.calls["delete_pod"] == 0
    assert (outcome.result, outcome.rule) == ("deferred", "not_leader")
    assert outcome.detail.endswith("; may proceed when this replica holds the leader Lease")
    assert api.list_events(NS) == []  # a replica past its fence writes no Event either


def test_one_event_per_pod_however_many_engine_series_it_invents(api: EmulatorServer,
                                                                 kube_client: KubeClient) -> None:
    """Issue 27 item 10: 64 frozen engine series of one pod in a dry-run namespace wrote 128 Events."""
    seeded = seed_deployment(api, "obs", "llama", "10.0.0.5", 8000)
    rem, metrics = remediator(kube_client, Rescrape(None))
    target = target_of(api, seeded["pod"])
    for n in range(64):
        snap = dataclasses.replace(SNAP, labels=(("engine", str(n)),))
        assert remediate(rem, target, snap, VERDICT, signals=SIGNALS).result == "dry_run"
    assert events(api, "obs") == [("StalledPodDryRun", "Deployment", "llama"), ("StalledPodDryRun", "Pod",
                                                                                 target.name)]
    assert results(metrics) == {"dry_run": 64.0}


def test_the_event_message_names_the_window_once(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    rem, _ = remediator(kube_client)
    remediate(rem, target_of(api, seeded["pod"]), SNAP, VERDICT, signals=SIGNALS)
    messages = [e["message"] for e in api.list_events(NS)]
    assert messages and all(m.count("window") == VERDICT.reason.count("window") == 1 for m in messages), messages


# -- what on-call reads: Event messages lead with the facts, log lines carry them as fields ------------------------
#: Monotonic 140 s, the verdict's sample at 130 s after 130 s without progress: the stall clock started at
#: monotonic 0, i.e. 140 s before this wall-clock time.
SINCE = "2026-12-01T05:12:00Z"


def nesting(text: str) -> int:
    """The deepest parenthesis nesting in ``text``."""
    depth = deepest = 0
    for c in text:
        depth += (c == "(") - (c == ")")
        deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize(("rails", "action", "result", "rule", "what", "why"), [
    ({}, "delete", "deleted", None, "Deleted pod", "stalled past the 120 s window (global) over 9 busy samples"),
    ({}, "evict", "evicted", None, "Evicted pod", "stalled past the 120 s window (global) over 9 busy samples"),
    ({"dry_run": True}, "delete", "dry_run", "dry_run", "Would delete pod",
     "stalled past the 120 s window (global) over 9 busy samples; dry-run, global dryRun is on"),
    ({"paused": True}, "delete", "deferred", "paused", "Deferred deletion of pod",
     "rule paused, the watchdog is paused (paused: true); may proceed when paused is set back to false"),
    ({"max_deletions": 0}, "delete", "deferred", "budget", "Deferred deletion of pod",
     "rule budget, cluster budget used: 0 deletions in the last 600 s (max 0); may proceed once maxDeletions is "
     "raised above 0"),
])
def test_event_messages_lead_with_the_facts(api: EmulatorServer, kube_client: KubeClient,
                                            caplog: pytest.LogCaptureFixture, rails: dict[str, Any],
                                            action: StallAction, result: str, rule: str | None, what: str,
                                            why: str) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)
    target = target_of(api, seeded["pod"])
    rem = builders.remediator(kube_client, open_policy(**rails), Rescrape(), new_metrics(), clock=lambda: 140.0,
                              wall_clock=lambda: WALL)
    with caplog.at_level(logging.INFO, logger="watchdog.controller.remediator"):
        assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS, action=action).result == result
    messages = {e["message"] for e in api.list_events(NS)}  # the same on the pod and on the Deployment
    pointer = "" if result == "deferred" else f" evidence: {target.uid[:8]}-{int(WALL)} in the watchdog log."
    assert messages == {f"{what} {target.ref}{FACTS}{SINCE}. Why: {why}.{pointer}"}
    (message,) = messages
    assert nesting(message) == 1 and message.count("window") <= 1 and len(message.encode()) <= MAX_MESSAGE
    # The log line of the outcome: its facts as fields (JSON writes them as top-level keys).
    (line,) = [r for r in caplog.records if r.getMessage().startswith("remediation ")]
    assert {k: getattr(line, k, None) for k in ("namespace", "pod", "uid", "engine", "state", "result", "rule")} == {
        "namespace": NS, "pod": target.name, "uid": target.uid, "engine": SNAP.key, "state": "stalled",
        "result": result, "rule": rule}
    assert line.reason == line.getMessage().split(": ", 1)[1]  # type: ignore[attr-defined]


def test_a_lost_answer_that_was_applied_says_so_after_the_rule(api: EmulatorServer, kube_client: KubeClient) -> None:
    seeded = seed_deployment(api, NS, "llama", "10.0.0.5", 8000)

    def lost(namespace: str, pod: str, uid: str, grace: int | None) -> Any:
        kube_client.delete_pod(namespace, pod, uid, grace)
        raise KubeError("delete pod", 504, "Gateway Timeout")

    rem = builders.remediator(FakeKube(kube_client, delete_pod=lost), open_policy(), Rescrape(), new_metrics(),
                     clock=lambda: 140.0, wall_clock=lambda: WALL)
    target = target_of(api, seeded["pod"])
    assert remediate(rem, target, SNAP, VERDICT, signals=SIGNALS).result == "deleted"
    assert {e["message"] for e in api.list_events(NS)} == {
        f"Deleted pod {target.ref}{FACTS}{SINCE}. Why: stalled past the 120 s window (global) over 9 busy samples; the "
        f"delete answer was lost (Gateway Timeout) and the pod is gone or terminating. evidence: {target.uid[:8]}-"
        f"{int(WALL)} in the watchdog log."}
