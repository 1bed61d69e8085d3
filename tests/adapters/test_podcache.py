"""The watch-based pod and namespace cache against the Kubernetes API emulator over real HTTP (the emulator serves
watches with resourceVersion, bookmarks, 410 and paging: watchdog/demo/emulator/watches.py)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tenacity

from watchdog.adapters import kube as kube_module
from watchdog.adapters import podcache
from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings, Watched, WatchStream
from watchdog.adapters.podcache import Informer, PodCache
from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.emulator import EmulatorServer

SELECTOR = "app=vllm"


class Flaky(KubeClient):
    """The real client; ``broken`` makes every WATCH fail to open as a dropped connection would,
    ``fails_in_stream`` makes every WATCH open and then fail (the API server's in-stream 504)."""

    broken = False
    fails_in_stream = False

    def watch(self, resource: Watched, label_selector: str, resource_version: str, timeout_s: int,
              namespace: str | None = None) -> WatchStream:
        if self.broken:
            with self._request(f"watch {resource}"):  # counted as a request, like the real one
                raise KubeError(f"watch {resource}", 0, "ConnectionResetError: connection reset by peer")
        stream = super().watch(resource, label_selector, resource_version, timeout_s, namespace)
        if self.fails_in_stream:
            stream.close()
            return _FailingStream(stream.what)  # type: ignore[return-value]
        return stream


class _FailingStream:
    def __init__(self, what: str) -> None:
        self.what = what

    def __iter__(self) -> Iterator[dict[str, Any]]:
        raise KubeError(self.what, 504, "Too large resource version")

    def close(self) -> None:
        pass


@pytest.fixture
def srv(emulator: EmulatorServer) -> EmulatorServer:
    """conftest's emulator, with namespace ml opted in and a bookmark every 0.1 s."""
    emulator.create_namespace("ml", {"vllm-watchdog.io/enabled": "true"})
    emulator.emulator.bookmark_interval_s = 0.1
    return emulator


@pytest.fixture
def kube(srv: EmulatorServer) -> Flaky:
    client = Flaky.from_settings(KubeSettings(host=srv.base_url, request_timeout_s=5))
    assert isinstance(client, Flaky)
    return client


def fast(kube: KubeClient, **kw: Any) -> Callable[[Watched, str, str | None], Informer]:
    """Informers with a 50 ms backoff (and whatever else the test says)."""
    return lambda resource, selector, namespace: Informer(kube, resource, selector, namespace,
                                                          backoff=tenacity.wait_fixed(0.05), **kw)


@pytest.fixture
def cache(kube: Flaky) -> Iterator[PodCache]:
    c = PodCache(kube, first_sync_wait_s=5, make=fast(kube))
    yield c
    c.close()


def pod(name: str, namespace: str = "ml", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": {"team": "a", "vllm-watchdog.io/exclude": "false"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": "vllm:1", "env": [{"name": "A"}],
                                                           "ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"podIP": "10.0.0.7", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None},
                                      {"type": "PodScheduled", "status": "True"}],
                       "containerStatuses": [{"name": "vllm", "restartCount": 2, "image": "vllm:1"}]}}


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in items)




def until(check: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    return wait_for("the cache", check, timeout=timeout_s, interval=0.02)


def test_one_list_then_adds_modifies_and_deletes_arrive_by_watch(srv: EmulatorServer, kube: Flaky,
                                                                    cache: PodCache) -> None:
    srv.create_pod(pod("llm-0", app="vllm"))
    srv.create_pod(pod("web-0", app="web"))
    assert names(cache.list_pods(SELECTOR)) == ["llm-0"]
    srv.create_pod(pod("llm-1", app="vllm"))
    until(lambda: names(cache.list_pods(SELECTOR)) == ["llm-0", "llm-1"])
    srv.patch_object("/api/v1/namespaces/ml/pods/llm-0", {"status": {"podIP": "10.0.0.9"}})
    until(lambda: {p["metadata"]["name"]: p["status"]["podIP"] for p in cache.list_pods(SELECTOR)}
          == {"llm-0": "10.0.0.9", "llm-1": "10.0.0.7"})
    srv.request("DELETE", "/api/v1/namespaces/ml/pods/llm-0")
    until(lambda: names(cache.list_pods(SELECTOR)) == ["llm-1"])
    assert srv.emulator.count_requests(verb="list", resource="pods") == 1
    assert srv.emulator.count_requests(verb="watch", resource="pods") == 1
    assert kube.api_requests == 2


def test_keeps_the_trimmed_pod_only(srv: EmulatorServer, cache: PodCache) -> None:
    created = srv.create_pod(pod("llm-0", app="vllm"))
    (cached,) = cache.list_pods(SELECTOR)
    meta = created["metadata"]
    assert cached == {
        "metadata": {"uid": meta["uid"], "namespace": "ml", "name": "llm-0",
                     "creationTimestamp": meta["creationTimestamp"],
                     "annotations": {"vllm-watchdog.io/exclude": "false"}},
        "spec": {"nodeName": "gpu-1",
                 "containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"restartCount": 2}]}}
    assert cache.list_namespaces("vllm-watchdog.io/enabled") == [
        {"metadata": {"name": "ml", "labels": {"vllm-watchdog.io/enabled": "true"}}, "status": {}}]


def test_a_bookmark_advances_the_resource_version_without_any_pod_event(srv: EmulatorServer,
                                                                         cache: PodCache) -> None:
    cache.list_pods(SELECTOR)
    informer = cache.informers[("pods", SELECTOR, None)]
    before = informer.resource_version
    srv.create_object("/api/v1/namespaces/ml/configmaps", {"metadata": {"name": "unrelated"}})
    srv.create_pod(pod("web-0", app="web"))  # a pod the selector does not pick: no event for this watch
    head = srv.emulator._head
    assert int(head) > int(before)
    until(lambda: informer.resource_version == str(head))
    assert cache.list_pods(SELECTOR) == [] and informer.lists == 1


def test_a_pod_leaving_or_entering_the_selector_is_dropped_or_added(srv: EmulatorServer, cache: PodCache) -> None:
    selector = "app in (vllm,sglang),!canary"
    srv.create_pod(pod("a", app="vllm"))
    srv.create_pod(pod("b", app="sglang"))
    srv.create_pod(pod("c", app="vllm", canary="1"))
    srv.create_pod(pod("d", app="web"))
    assert names(cache.list_pods(selector)) == ["a", "b"]
    srv.patch_object("/api/v1/namespaces/ml/pods/a", {"metadata": {"labels": {"canary": "yes"}}})
    srv.patch_object("/api/v1/namespaces/ml/pods/d", {"metadata": {"labels": {"app": "sglang"}}})
    until(lambda: names(cache.list_pods(selector)) == ["b", "d"])
    srv.patch_object("/api/v1/namespaces/ml/pods/c", {"metadata": {"labels": {"canary": None}}})
    until(lambda: names(cache.list_pods(selector)) == ["b", "c", "d"])


def test_410_gone_lists_again_and_a_failed_watch_resumes_with_one_log_line(
        srv: EmulatorServer, kube: Flaky, cache: PodCache, caplog: pytest.LogCaptureFixture) -> None:
    srv.create_pod(pod("llm-0", app="vllm"))
    srv.create_pod(pod("llm-1", app="vllm"))
    assert names(cache.list_pods(SELECTOR)) == ["llm-0", "llm-1"]
    informer = cache.informers[("pods", SELECTOR, None)]
    # The watch fails (and keeps failing for a while): meanwhile a pod goes, one comes, and etcd compacts.
    kube.broken = True
    with caplog.at_level(logging.WARNING, "watchdog.adapters.podcache"):
        until(lambda: informer._stream).close()
        until(lambda: informer.failing_since is not None and len(caplog.records) >= 2)
    srv.request("DELETE", "/api/v1/namespaces/ml/pods/llm-0")
    srv.create_pod(pod("llm-2", app="vllm"))
    srv.emulator.compact()
    assert names(cache.list_pods(SELECTOR)) == ["llm-0", "llm-1"]  # stale, but not yet for STALE_S
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all("\n" not in line and line.startswith("pods 'app=vllm' cache: ") for line in lines)
    assert lines[0].endswith(": ProtocolError: Response ended prematurely; again in 0.1 s")  # the cut stream
    assert lines[1:] and all(line.endswith("connection reset by peer; again in 0.1 s") for line in lines[1:])
    assert not any(r.exc_info for r in caplog.records)
    kube.broken = False
    until(lambda: names(cache.list_pods(SELECTOR)) == ["llm-1", "llm-2"])
    assert informer.lists == 2 and informer.failing_since is None
    assert srv.emulator.count_requests(verb="list", resource="pods") == 2


def test_410_without_relisting_would_leave_the_cache_stale(srv: EmulatorServer, kube: Flaky) -> None:
    """The rounds by hand: a WATCH from a compacted resourceVersion ends in 410, and the next round LISTs."""
    srv.create_pod(pod("llm-0", app="vllm"))
    informer = Informer(kube, "pods", SELECTOR, watch_s=(1, 1))
    informer._list()
    old = informer.resource_version
    srv.request("DELETE", "/api/v1/namespaces/ml/pods/llm-0")
    srv.emulator.compact()
    informer._watch()  # 410 Expired: logged, nothing raised
    assert informer.resource_version == old and names(informer.items()) == ["llm-0"]
    informer._round()
    assert names(informer.items()) == [] and informer.lists == 2


def test_lists_page_by_page(srv: EmulatorServer, kube: Flaky, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podcache, "PAGE", 2)
    for i in range(5):
        srv.create_pod(pod(f"llm-{i}", app="vllm"))
    informer = Informer(kube, "pods", SELECTOR)
    informer._list()
    assert names(informer.items()) == [f"llm-{i}" for i in range(5)]
    assert srv.emulator.count_requests(verb="list", resource="pods") == 3


def blob(name: str, size: int) -> dict[str, Any]:
    """A selected pod carrying ``size`` bytes of a tenant's annotation."""
    big = pod(name, app="vllm")
    big["metadata"]["annotations"]["tenant.example/blob"] = "x" * size
    return big


def test_a_page_above_the_byte_cap_is_asked_again_smaller_and_every_pod_is_listed(
        srv: EmulatorServer, kube: Flaky, cache: PodCache, bytes_read: Counter[object],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A tenant's 20 KB pods make a page of 500 far larger than the cap: the page is asked again a tenth as large
    (down to 1) and the next ones twice as large again, never reading more than the cap + one chunk of an answer;
    the LIST completes with every pod, no failure, and one WARNING naming the page's size."""
    monkeypatch.setattr(podcache, "PAGE_MAX_BYTES", 50_000)
    for i in range(12):
        srv.create_pod(blob(f"llm-{i:02d}", 20_000))
    srv.create_pod(pod("llm-small", app="vllm"))
    caplog.set_level(logging.DEBUG, logger="watchdog.adapters.podcache")
    assert names(cache.list_pods(SELECTOR)) == [f"llm-{i:02d}" for i in range(12)] + ["llm-small"]
    informer = cache.informers[("pods", SELECTOR, None)]
    assert informer.lists == 1 and informer.last_error == "" and informer.resource_version
    assert cache.list_pods(SELECTOR)[0]["metadata"]["annotations"] == {"vllm-watchdog.io/exclude": "false"}
    assert bytes_read and max(bytes_read.values()) <= 50_000 + kube_module._CHUNK
    pages = srv.emulator.count_requests(verb="list", resource="pods")
    assert pages > 13 // 2  # 500, 50, 5 above the cap; then pages of 1, 2 (4 above) ...
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(
        f"pods {SELECTOR!r} cache: a LIST page of 500 items: answer above 50000 bytes (stopped reading at ")
    assert "Content-Length 2" in warned[0] and warned[0].endswith("asking it again 50 at a time (objects this large "
                                                                  "are a tenant's doing)")


def test_one_object_above_the_byte_cap_fails_the_list_in_one_line(srv: EmulatorServer, kube: Flaky, cache: PodCache,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podcache, "PAGE_MAX_BYTES", 10_000)
    srv.create_pod(pod("llm-0", app="vllm"))
    srv.create_pod(blob("llm-1", 20_000))
    with pytest.raises(KubeError, match=r"cache not synced yet .*last error: list pods 'app=vllm': one object alone "
                                        r"is above the LIST page cap \(PAGE_MAX_BYTES, 10000 bytes\)$") as info:
        cache.list_pods(SELECTOR)
    assert "\n" not in str(info.value)
    informer = Informer(kube, "pods", SELECTOR)
    with pytest.raises(KubeError) as direct:
        informer._list()
    assert str(direct.value) == ("list pods 'app=vllm': one object alone is above the LIST page cap "
                                 "(PAGE_MAX_BYTES, 10000 bytes)")


def test_nothing_is_listed_before_the_first_sync(caplog: pytest.LogCaptureFixture) -> None:
    kube = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:9", request_timeout_s=1))
    cache = PodCache(kube, first_sync_wait_s=0.3, make=fast(kube))
    try:
        with pytest.raises(KubeError) as info:
            cache.list_pods(SELECTOR)
    finally:
        cache.close()
    text = str(info.value)
    assert text.startswith("watch pods 'app=vllm': cache not synced yet (no LIST has completed); last error: "
                           "list pods 'app=vllm': ")
    assert "Connection refused" in text and "\n" not in text


def test_a_cache_failing_for_longer_than_stale_s_refuses_to_answer(srv: EmulatorServer, kube: Flaky,
                                                                   cache: PodCache,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    srv.create_pod(pod("llm-0", app="vllm"))
    assert names(cache.list_pods(SELECTOR)) == ["llm-0"]
    monkeypatch.setattr(podcache, "STALE_S", 0.2)
    kube.broken = True
    informer = cache.informers[("pods", SELECTOR, None)]
    until(lambda: informer._stream).close()
    until(lambda: informer.failing_since is not None)
    time.sleep(0.3)
    with pytest.raises(KubeError, match=r"^watch pods 'app=vllm': cache stale: LIST/WATCH failing for 0 s: "):
        cache.list_pods(SELECTOR)
    kube.broken = False
    until(lambda: informer.failing_since is None)
    assert names(cache.list_pods(SELECTOR)) == ["llm-0"]


@pytest.fixture
def short_watches(kube: Flaky) -> Iterator[PodCache]:
    """A cache whose WATCHes each ask to end after 1 s: a watch already open gives way to the next one soon."""
    c = PodCache(kube, first_sync_wait_s=5, make=fast(kube, watch_s=(1, 1)))
    yield c
    c.close()


def test_watches_that_open_and_then_fail_make_the_cache_stale_too(srv: EmulatorServer, kube: Flaky,
                                                                 short_watches: PodCache,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cache = short_watches
    srv.create_pod(pod("llm-0", app="vllm"))
    assert names(cache.list_pods(SELECTOR)) == ["llm-0"]
    monkeypatch.setattr(podcache, "STALE_S", 0.3)
    # From the next WATCH on; the informer may have opened one before this line (a race the test does not win
    # every time): it ends within 1 s (short_watches), then every WATCH fails.
    kube.fails_in_stream = True
    informer = cache.informers[("pods", SELECTOR, None)]
    until(lambda: informer.failing_since is not None)
    time.sleep(0.5)  # ~5 watches opened and failed meanwhile
    with pytest.raises(KubeError, match=r"cache stale: LIST/WATCH failing for \d+ s: .*HTTP 504 Too large"):
        cache.list_pods(SELECTOR)
    kube.fails_in_stream = False
    until(lambda: informer.failing_since is None)
    assert names(cache.list_pods(SELECTOR)) == ["llm-0"]


def test_close_stops_every_thread_at_once(srv: EmulatorServer, kube: Flaky) -> None:
    cache = PodCache(kube, first_sync_wait_s=5, make=fast(kube))
    cache.list_pods(SELECTOR)
    cache.list_namespaces("vllm-watchdog.io/enabled")
    started = time.monotonic()
    cache.close()
    assert time.monotonic() - started < 1
    assert not any(i._thread and i._thread.is_alive() for i in cache.informers.values())


def test_namespace_only_mode_lists_and_watches_pods_in_the_named_namespaces_alone(
        srv: EmulatorServer, kube: Flaky, cache: PodCache) -> None:
    """Issue 30 item 5 (watchNamespaces): a Role in each namespace allows no cluster-wide LIST, so the pods of each
    named namespace come from a LIST and a WATCH there; a pod elsewhere is never seen, by the client or the cache."""
    for name, namespace in (("a1", "team-a"), ("b1", "team-b"), ("c1", "team-c")):
        srv.create_pod(pod(name, namespace, app="vllm"))
    scoped = ("team-a", "team-b")
    assert names(kube.list_pods(SELECTOR, scoped)) == ["a1", "b1"]
    assert names(kube.list_pods(SELECTOR)) == ["a1", "b1", "c1"]
    assert names(cache.list_pods(SELECTOR, scoped)) == ["a1", "b1"]
    assert set(cache.informers) == {("pods", SELECTOR, "team-a"), ("pods", SELECTOR, "team-b")}
    srv.create_pod(pod("a2", "team-a", app="vllm"))
    srv.create_pod(pod("c2", "team-c", app="vllm"))
    until(lambda: names(cache.list_pods(SELECTOR, scoped)) == ["a1", "a2", "b1"])
    assert cache.informers[("pods", SELECTOR, "team-a")].name == "pods 'app=vllm' in team-a"
