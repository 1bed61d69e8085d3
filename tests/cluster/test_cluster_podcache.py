"""The discovery cache against the real kube-apiserver (v1.35), as the chart's ServiceAccount (so ``watch`` on pods
and namespaces is what the ClusterRole grants): one LIST, then a pod created, relabelled out of the selector and
deleted arrives by WATCH alone; a WATCH resumed from the paged LIST's resourceVersion gets what happened in
between."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from watchdog.adapters import podcache
from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.adapters.podcache import Informer, PodCache
from watchdog.demo.controlplane import workloads
from watchdog.demo.controlplane.plane import audit
from watchdog.demo.controlplane.workloads import VLLM_LABEL

pytestmark = pytest.mark.cluster

SELECTOR = "app.kubernetes.io/name=vllm"


def _client(control_plane, release, tmp_path: Path) -> KubeClient:
    path = control_plane.write_kubeconfig(tmp_path / "sa.kubeconfig", release.token, "watchdog")
    return KubeClient.from_settings(KubeSettings(kubeconfig=str(path), request_timeout_s=10))


def _pod(s, namespace: str, name: str) -> None:
    """A bare pod (no owner: the garbage collector would take a pod whose owner does not exist)."""
    s.api.create(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": dict(VLLM_LABEL)},
        "spec": workloads.pod_spec(s.sim_port, 0)})


def _names(items: list[dict], namespace: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in items if p["metadata"]["namespace"] == namespace)


def _until(check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s")


def test_pods_arrive_change_and_go_by_watch_without_another_list(scenario, release, control_plane, tmp_path):
    s = scenario("cache-watch")
    ns = s.namespace("x", "true")
    rel = release()
    kube = _client(control_plane, rel, tmp_path)
    # The release's account is shared with the watchdogs of earlier tests: count this test's requests only.
    lists_before = len(audit(control_plane, rel.user, verb="list", resource="pods"))
    watches_before = len(audit(control_plane, rel.user, verb="watch", resource="pods"))
    cache = PodCache(kube, first_sync_wait_s=20)
    try:
        assert _names(cache.list_pods(SELECTOR), ns) == []
        _pod(s, ns, "late")
        _until(lambda: _names(cache.list_pods(SELECTOR), ns) == ["late"])
        (cached,) = [p for p in cache.list_pods(SELECTOR) if p["metadata"]["namespace"] == ns]
        assert set(cached) == {"metadata", "spec", "status"} and "labels" not in cached["metadata"]
        path = f"/api/v1/namespaces/{ns}/pods/late"
        s.api.merge_patch(path, {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}})
        _until(lambda: _names(cache.list_pods(SELECTOR), ns) == [])  # left the selector: the API's DELETED
        s.api.merge_patch(path, {"metadata": {"labels": {"app.kubernetes.io/name": "vllm"}}})
        _until(lambda: _names(cache.list_pods(SELECTOR), ns) == ["late"])
        s.api.delete(f"/api/v1/namespaces/{ns}/pods/late", {"gracePeriodSeconds": 0})
        _until(lambda: _names(cache.list_pods(SELECTOR), ns) == [])
        informer = cache.informers[("pods", SELECTOR, None)]
        assert informer.lists == 1
    finally:
        cache.close()
    lists = audit(control_plane, rel.user, verb="list", resource="pods")[lists_before:]
    watches = audit(control_plane, rel.user, verb="watch", resource="pods")[watches_before:]
    assert len(lists) == 1 and len(watches) == 1, (len(lists), len(watches))


def test_a_watch_resumed_from_the_list_gets_what_happened_meanwhile(scenario, release, control_plane, tmp_path,
                                                                   monkeypatch):
    """Paged LIST (the API server's continue tokens), then a deletion while no watch is open: the WATCH from the
    list's resourceVersion delivers it, no second LIST. (A 410 could not be provoked here: this API server's watch
    cache replays even resourceVersion 1, etcd compaction or not; 410 -> re-LIST is proven on the emulator.)"""
    s = scenario("cache-resume")
    ns = s.namespace("x", "true")
    kube = _client(control_plane, release(), tmp_path)
    monkeypatch.setattr(podcache, "PAGE", 1)  # one pod per page
    for name in ("a", "b"):
        _pod(s, ns, name)
    informer = Informer(kube, "pods", SELECTOR, watch_s=(2, 2))
    before = kube.api_requests
    informer._list()
    pages = kube.api_requests - before
    assert _names(informer.items(), ns) == ["a", "b"] and pages >= 2
    listed_at = informer.resource_version
    s.api.delete(f"/api/v1/namespaces/{ns}/pods/a", {"gracePeriodSeconds": 0})
    _until(lambda: s.pod(ns, "a") is None)
    informer._watch()  # from the list's resourceVersion, ended by the API server after 2 s
    assert informer.lists == 1 and kube.api_requests - before == pages + 1
    assert _names(informer.items(), ns) == ["b"] and int(informer.resource_version) > int(listed_at)


def test_a_page_above_the_byte_cap_is_asked_again_smaller_with_the_same_continue_token(
        scenario, release, control_plane, tmp_path, monkeypatch, caplog):
    """A tenant's pods with 200 KB annotations (the API allows 256 KiB) make a page of 500 larger than the cap: the
    real API server answers the same continue token with a smaller ``limit``, and the LIST has every pod."""
    s = scenario("cache-cap")
    ns = s.namespace("x", "true")
    kube = _client(control_plane, release(), tmp_path)
    monkeypatch.setattr(podcache, "PAGE_MAX_BYTES", 500_000)
    for name in ("a", "b", "c", "d", "e"):
        _pod(s, ns, name)
        s.api.merge_patch(f"/api/v1/namespaces/{ns}/pods/{name}",
                          {"metadata": {"annotations": {"tenant.example/blob": "x" * 200_000}}})
    informer = Informer(kube, "pods", SELECTOR)
    with caplog.at_level("WARNING", logger="watchdog.adapters.podcache"):
        informer._list()
    assert _names(informer.items(), ns) == ["a", "b", "c", "d", "e"] and informer.lists == 1
    (warned,) = [r.getMessage() for r in caplog.records if "asking it again 50 at a time" in r.getMessage()]
    assert "answer above 500000 bytes (stopped reading at " in warned, warned
