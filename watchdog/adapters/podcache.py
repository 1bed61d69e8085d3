"""I/O: a watch-based cache of the pods and namespaces the cycle lists, so that a cycle sends no LIST at all.

One :class:`Informer` per (resource, label selector) — the namespace opt-in selector and each target's pod
selector; the API server applies the selector (an object that stops matching arrives as DELETED). Each runs in
its own daemon thread:

1. LIST, paged (:data:`PAGE` items a request, so at most one page of full pod JSON is decoded at a time), each
   item trimmed at once to the fields discovery reads (:mod:`watchdog.core.trim`). A tenant sizes its pods, so a
   page is read only up to :data:`PAGE_MAX_BYTES`: a page above it is asked again with a tenth of the items (down
   to 1; one WARNING per LIST), and the next pages with twice as many as the last page that fit, up to
   :data:`PAGE`. Only one object above the cap (an API server stores none: etcd's 1.5 MB) fails the LIST;
2. WATCH from the list's resourceVersion with bookmarks, ended by the API server after a random 5-10 min
   (client-go's spread); ADDED/MODIFIED/DELETED update the cache, every event and BOOKMARK advances the
   resourceVersion the next WATCH resumes from;
3. 410 Gone (the resourceVersion was compacted): LIST again. Every :data:`RESYNC_S` a full re-LIST anyway;
4. any other failure: one log line, then the round is retried with exponential backoff (tenacity, 0.5 s to
   30 s with jitter): the WATCH resumes from the last resourceVersion, a LIST that failed is sent again.

Every LIST page and every WATCH (re)start is one request on the shared :class:`KubeClient` (its
``api_requests``). :meth:`PodCache.list_pods` / :meth:`PodCache.list_namespaces` answer from memory. Before an
informer's first LIST completed they wait up to ``first_sync_wait_s`` (or until that LIST fails) and then raise
KubeError, carrying the HTTP status of the informer's last failure; they raise too once an informer has failed for
more than :data:`STALE_S`. What that means is the controller's: a cluster-wide list failing fails the cycle (it
scrapes nothing, acts on nothing and does not count as ready; the warm-up starts with the first complete cycle);
in namespace-only mode the pods of that one namespace are unknown (:mod:`watchdog.controller.nsreads`), and
:meth:`PodCache.keep_pods_of` stops the informers of a namespace no longer watched (deleted, opted out). A 403 on
one namespace's LIST/WATCH is not told to the credentials (:meth:`KubeClient.list_page`). The cache is never
evidence for a deletion: the remediator GETs the pod afresh.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import tenacity

from watchdog.adapters.kube import KubeClient, KubeError, TooLarge, Watched
from watchdog.core.trim import trim_namespace, trim_pod

log = logging.getLogger("watchdog.adapters.podcache")

PAGE = 500  # items per LIST page (client-go's informers page the same): ~3 MiB of pod JSON decoded at a time
PAGE_MAX_BYTES = 12 * 1024 * 1024
"""Bytes of one LIST page's body at most, enforced while it is read. 3.5x a page of 500 real 7 KiB pods (pods up
to 24 KiB on average still come 500 a page), yet a tenant's 500 pods of 256 KiB annotations would be 128 MiB. What a
page costs decoded is the tenant's to shape: measured (json.loads, tracemalloc, body included) 2x its bytes for long
annotations, ~14x for pods of tiny labels and the ``{}`` per label their managedFields carry, ~17x once the page
also holds one non-ASCII character (the decoded text becomes UCS-4): <= ~215 MiB, inside the chart's 384Mi memory
limit above the ~140 MiB the process holds at 10,000 pods. Informers listing at the same moment add up."""
RESYNC_S = 600.0  # a full re-LIST every 10 min: whatever a watch could have lost (a proxy, a bug) lasts no longer
WATCH_S = (300, 600)  # each WATCH asks the API server to end it after a random time in this range, seconds
STALE_S = 60.0  # failing (LIST or WATCH) this long: the cache is stale, listing raises until it recovers
Trim = Callable[[Mapping[str, Any]], dict[str, Any]]


class Informer:
    """The objects of one ``resource`` matching ``selector`` (pods: of every namespace, or of ``namespace``), kept
    current by LIST + WATCH in a thread."""

    def __init__(self, kube: KubeClient, resource: Watched, selector: str, namespace: str | None = None, *,
                 clock: Callable[[], float] = time.monotonic, resync_s: float = RESYNC_S,
                 watch_s: tuple[int, int] = WATCH_S, backoff: tenacity.wait.wait_base | None = None) -> None:
        self.kube, self.resource, self.selector, self.namespace, self.clock = kube, resource, selector, namespace, clock
        self.trim: Trim = trim_pod if resource == "pods" else trim_namespace
        self.resync_s, self.watch_s = resync_s, watch_s
        self.name = (f"{resource} {selector!r}" if selector else resource) + (f" in {namespace}" if namespace else "")
        self.synced = threading.Event()  # the first LIST completed
        self.settled = threading.Event()  # the first LIST completed or a LIST/WATCH failed
        self.resource_version = ""
        self.lists = 0  # completed LISTs (the first, re-LISTs after 410, resyncs)
        self.failing_since: float | None = None
        self.last_error = ""
        self.last_status = 0  # HTTP status of the last failure (0: none, or no answer)
        self._items: dict[str, dict[str, Any]] = {}  # namespace/name -> trimmed object
        self._lock = threading.Lock()
        self._relist_at = 0.0  # clock time of the next full LIST (0: at once)
        self._warned = False  # this LIST logged a page above PAGE_MAX_BYTES
        self._stopping = threading.Event()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._retrying = tenacity.Retrying(
            wait=backoff or tenacity.wait_exponential_jitter(multiplier=0.5, max=30), sleep=self._sleep,
            stop=lambda _: self._stopping.is_set(), before_sleep=self._failed, reraise=True)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.resource}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def _sleep(self, seconds: float) -> None:  # the backoff, cut short by stop()
        self._stopping.wait(seconds)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._retrying(self._round)
            except Exception:  # only when stopping: the backoff stops, the last error is re-raised
                return

    def _failed(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if self.failing_since is None:
            self.failing_since = self.clock()
        self.last_error = " ".join(str(exc).split())[:300] or type(exc).__name__
        self.last_status = exc.status if isinstance(exc, KubeError) else 0
        self.settled.set()
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s cache: %s; again in %.1f s", self.name, self.last_error, wait,
                    extra={"reason": "watch", "resource": self.resource})

    def _round(self) -> None:
        """LIST when needed, then one WATCH until the API server ends it (or 410: LIST next round)."""
        if not self.synced.is_set() or self.clock() >= self._relist_at:
            self._list()
        self._watch()

    def _list(self) -> None:
        fresh: dict[str, dict[str, Any]] = {}
        token, version, limit = None, "", PAGE
        self._warned = False
        while True:
            body, limit = self._page(token, limit)
            meta = body.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            for item in body.get("items") or []:
                fresh[_key(item)] = self.trim(item)
            del body
            token, limit = meta.get("continue"), min(PAGE, 2 * limit)
            if not token or self._stopping.is_set():
                break
        with self._lock:
            self._items, self.resource_version = fresh, version
        self.lists += 1
        self._relist_at = self.clock() + self.resync_s
        self.failing_since = None
        self.synced.set()
        self.settled.set()
        log.debug("%s cache: listed %d at resourceVersion %s", self.name, len(fresh), version)

    def _page(self, token: str | None, limit: int) -> tuple[dict[str, Any], int]:
        """The LIST page from ``token`` and the item count it was asked with: ``limit``, or a tenth of it (down to 1)
        while the answer is above :data:`PAGE_MAX_BYTES`; KubeError when one object is."""
        while True:
            try:
                return self.kube.list_page(self.resource, self.selector, limit, token, self.namespace,
                                           max_bytes=PAGE_MAX_BYTES), limit
            except TooLarge as exc:
                if limit == 1:
                    raise KubeError(exc.call, 0, f"one object alone is above the LIST page cap (PAGE_MAX_BYTES, "
                                                 f"{PAGE_MAX_BYTES} bytes)") from exc
                smaller = max(1, limit // 10)
                log.log(logging.DEBUG if self._warned else logging.WARNING, "%s cache: a LIST page of %d items: %s; "
                        "asking it again %d at a time (objects this large are a tenant's doing)", self.name, limit,
                        exc.reason, smaller, extra={"reason": "too_large", "resource": self.resource})
                self._warned, limit = True, smaller

    def _watch(self) -> None:
        timeout = random.randint(*self.watch_s)
        timeout = max(1, min(timeout, int(self._relist_at - self.clock()) + 1))  # end it for the resync
        self._stream = stream = self.kube.watch(self.resource, self.selector, self.resource_version, timeout,
                                                self.namespace)
        opened, events = self.clock(), 0
        try:
            for event in stream:
                self._apply(event)
                self.failing_since = None  # the watch delivers (an open stream alone proves nothing)
                events += 1
                if self._stopping.is_set():
                    return
            if not events and timeout > 1 and self.clock() - opened < 1:  # client-go's "very short watch"
                raise KubeError(stream.what, 0, f"the API server ended the watch at once, asked for {timeout} s")
            self.failing_since = None  # ended as the API server ends every watch
        except KubeError as exc:
            if exc.status != 410:
                raise
            log.info("%s cache: resourceVersion %s expired (410 Gone): listing again", self.name,
                     self.resource_version, extra={"reason": "expired", "resource": self.resource})
            self._relist_at = 0.0
        finally:
            self._stream = None

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._items[_key(obj)] = self.trim(obj)
            elif kind == "DELETED":
                self._items.pop(_key(obj), None)
            if version and kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                self.resource_version = version


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class PodCache:
    """``list_namespaces`` / ``list_pods`` of the controller's port, from informers (one per resource, selector
    and, in namespace-only mode, namespace; started by :meth:`watch` or on first use); :meth:`close` stops them."""

    def __init__(self, kube: KubeClient, *, first_sync_wait_s: float, clock: Callable[[], float] = time.monotonic,
                 make: Callable[[Watched, str, str | None], Informer] | None = None) -> None:
        self.kube, self.first_sync_wait_s, self.clock = kube, first_sync_wait_s, clock
        self._make = make or (lambda resource, selector, namespace: Informer(kube, resource, selector, namespace,
                                                                              clock=clock))
        self.informers: dict[tuple[Watched, str, str | None], Informer] = {}
        self._lock = threading.Lock()

    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]:
        return self._items("namespaces", label_selector, None)

    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        if namespaces is None:
            return self._items("pods", label_selector, None)
        return [pod for namespace in namespaces for pod in self._items("pods", label_selector, namespace)]

    def close(self) -> None:
        for informer in list(self.informers.values()):
            informer.stop()

    def watch(self, resource: Watched, selector: str, namespace: str | None = None) -> Informer:
        """The informer of ``resource`` objects matching ``selector`` (in ``namespace``), started on first call."""
        with self._lock:
            informer = self.informers.get((resource, selector, namespace))
            if informer is None:
                informer = self.informers[(resource, selector, namespace)] = self._make(resource, selector, namespace)
                informer.start()
            return informer

    def keep_pods_of(self, namespaces: Collection[str]) -> None:
        """Stop and forget the pod informers of every namespace not in ``namespaces`` (namespace-only mode: a
        namespace deleted or opted out); a later :meth:`list_pods` there starts a new one (a new first LIST)."""
        with self._lock:
            gone = [key for key in self.informers if key[0] == "pods" and key[2] is not None
                    and key[2] not in namespaces]
            stopped = [self.informers.pop(key) for key in gone]
        for informer in stopped:
            informer.stop()
            log.info("%s cache: stopped (its namespace is no longer watched)", informer.name,
                     extra={"reason": "watch", "resource": informer.resource})

    def _items(self, resource: Watched, selector: str, namespace: str | None) -> list[dict[str, Any]]:
        """The informer's objects; KubeError (with the status of its last failure) before its first LIST
        completed -- waiting up to ``first_sync_wait_s`` for that LIST or its first failure -- and while stale."""
        informer = self.watch(resource, selector, namespace)
        informer.settled.wait(self.first_sync_wait_s)
        if not informer.synced.is_set():
            why = f"; last error: {informer.last_error}" if informer.last_error else ""
            raise KubeError(f"watch {informer.name}", informer.last_status,
                            f"cache not synced yet (no LIST has completed){why}")
        since = informer.failing_since
        if since is not None and self.clock() - since > STALE_S:
            raise KubeError(f"watch {informer.name}", informer.last_status, f"cache stale: LIST/WATCH failing for "
                            f"{self.clock() - since:.0f} s: {informer.last_error}")
        return informer.items()
