"""Kubernetes API emulator for the demo and the tests: kmock 0.8's ``KubernetesEmulator`` with its gaps filled.

An in-memory emulator over real HTTP, not a cluster (no RBAC, admission, kubelet, garbage collection, Events
aggregation). Reaching into ``kmock._internal`` (hence the pin ``kmock==0.8``), it adds: ``/api/v1/namespaces``
(kmock's path parser gave 500; :mod:`.paths` patches it on import, and ``watch=True``); empty lists for the kinds in
:data:`RESOURCES` (404 before); ``labelSelector`` on list and watch (``a=b``, ``a!=b``, ``a``, ``!a``,
``a in (x)``, ``a notin (x)``); server-set ``uid``, ``resourceVersion``, ``creationTimestamp`` and
``generateName`` with 201 on create; DeleteOptions ``preconditions`` (mismatch: 409 Conflict ``Status``);
PUT replace (was 404); watches with ``timeoutSeconds``, ``resourceVersion`` (410 once compacted), bookmarks and
paged LISTs (:mod:`.watches`); ``KubeEmulator.request_log`` (kmock's own request history is dropped: it made every
request scan all earlier ones); cluster-scoped ``v1/nodes``; ``fieldSelector`` (:mod:`.selectors`), the pods
``eviction`` subresource (429 while ``KubeEmulator.eviction_blocked`` says so) and 409 for a PATCH carrying a
stale ``metadata.resourceVersion``.
Deleted pods vanish at once, whereas a real kubelet honours the grace period while the pod lingers with
``deletionTimestamp`` set.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any, NamedTuple, cast

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, references, rendering

from watchdog.demo.emulator.client import SEED_HEADER, EmulatorClient, EmulatorError
from watchdog.demo.emulator.paths import true  # importing it patches kmock's request parsing
from watchdog.demo.emulator.responses import EVICTED, eviction_is_blocked, not_found, status_response
from watchdog.demo.emulator.selectors import (
    fields_match,
    labels_of,
    parse_field_selector,
    parse_selector,
    selector_matches,
)
from watchdog.demo.emulator.watches import EventLog, WatchSpec, expired, page, stream

# resource ("group/version/plural") -> (kind, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "v1/namespaces": ("Namespace", False), "v1/pods": ("Pod", True), "v1/events": ("Event", True),
    "events.k8s.io/v1/events": ("Event", True), "coordination.k8s.io/v1/leases": ("Lease", True),
    "apps/v1/replicasets": ("ReplicaSet", True), "apps/v1/deployments": ("Deployment", True),
    "apps/v1/statefulsets": ("StatefulSet", True), "v1/nodes": ("Node", False),
    "v1/configmaps": ("ConfigMap", True),
}

def _api_version(resource: references.resource) -> str:
    return f"{resource.group}/{resource.version}".lstrip("/")


def _kind(resource: references.resource) -> tuple[str, bool]:
    """(kind, namespaced); for resources not in RESOURCES: the capitalized plural, namespaced."""
    return RESOURCES.get(f"{_api_version(resource)}/{resource.plural}", (str(resource.plural).capitalize(), True))


class ApiRequest(NamedTuple):
    """One recorded API request: ``verb`` is list/watch/get/create/patch/replace/delete/evict/other."""

    method: str  # "GET", "DELETE", ...
    path: str  # "/api/v1/namespaces/ns/pods/p"
    query: str  # raw query string, "" when none
    verb: str
    resource: str  # plural, "group/plural" outside the core group ("pods", "apps/replicasets"); "" if none


_VERBS = {"LIST": "list", "WATCH": "watch", "FETCH": "get", "CREATE": "create", "UPDATE": "patch", "DELETE": "delete"}


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the gaps listed in the module docstring closed. Runs inside one asyncio loop."""

    request_log: list[ApiRequest] = attrs.field(factory=list, init=False)
    eviction_blocked: bool | set[str] = attrs.field(factory=set, init=False)  # True or {"ns/pod"}: PDB says no
    several_pdbs: set[str] = attrs.field(factory=set, init=False)  # {"ns/pod"}: selected by 2+ PDBs (500)
    bookmark_interval_s: float = attrs.field(default=1.0, init=False)  # idle watches get a BOOKMARK this often
    #: namespaces whose every request gets RBAC's 403 (the watchdog's RoleBinding there deleted); a WATCH already
    #: open goes on until it ends, as on a real API server
    forbidden: set[str] = attrs.field(factory=set, init=False)
    _rv: int = attrs.field(default=0, init=False)
    _head: int = attrs.field(default=0, init=False)  # resourceVersion of the last event (what a LIST reports)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for key, (kind, namespaced) in RESOURCES.items():
            self.resources[key] = references.ResourceInfo(kind=kind, namespaced=namespaced)
        setattr(self, "_buses", collections.defaultdict(lambda: EventLog(self._stamp_event)))  # noqa: B010 (kmock's bus)

    def _stamp_event(self, rv_text: str | None) -> int:
        rv = int(rv_text) if rv_text and rv_text.isdigit() else 0
        rv = rv if rv > self._head else int(self._next_rv())
        self._head = max(self._head, rv)
        return rv

    def compact(self) -> int:
        """Emulate etcd compaction: every watch from a resourceVersion before now gets 410 Expired. Returns
        the current resourceVersion. Call it from the emulator's loop, or between requests."""
        for log in list(self._buses.values()):
            cast(EventLog, log).compact(self._head)
        return self._head

    def count_requests(self, verb: str | None = None, resource: str | None = None, method: str | None = None) -> int:
        """How many recorded requests match all given filters (None = any)."""
        return sum(1 for r in list(self.request_log)
                   if (verb is None or r.verb == verb) and (resource is None or r.resource == resource)
                   and (method is None or r.method == method.upper()))

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _record(self, request: rendering.Request) -> None:
        if any(k.lower() == SEED_HEADER.lower() for k in request.headers):
            return
        res = request.resource
        verb = _VERBS.get(request.action.value, "other") if request.action else "other"
        verb = "replace" if request.method == enums.method.PUT and request.name else verb
        verb = "evict" if request.method == enums.method.POST and request.subresource == "eviction" else verb
        resource = "" if res is None or not res.plural else f"{res.group}/{res.plural}".lstrip("/")
        self.request_log.append(ApiRequest(request.method.value, request.url.path, request.url.query_string,
                                           verb, resource))
        if len(self.request_log) > 100_000:  # keep the newest entries only
            del self.request_log[:10_000]

    def _object(self, request: rendering.Request) -> kmock.Object | None:
        """The stored, not deleted object the request's URL names, if any."""
        if request.resource is None or request.name is None:
            return None
        key = (request.resource, request.namespace, request.name)
        return self.objects[key] if key in self.objects and not self.objects[key].deleted else None

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        self._record(request)
        try:
            return await self._dispatch(request)
        finally:
            self._forget_request(request)

    async def _dispatch(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        action = request.action  # None for non-Kubernetes paths
        if request.namespace in self.forbidden and not any(k.lower() == SEED_HEADER.lower() for k in request.headers):
            plural = request.resource.plural if request.resource is not None else "resource"
            return status_response(403, "Forbidden", f'{plural} is forbidden: the caller cannot access resource '
                                   f'"{plural}" in the namespace "{request.namespace}"')
        if request.method == enums.method.PUT and request.name:
            return await self._replace(request)
        if request.method == enums.method.POST and request.name and request.subresource == "eviction":
            return await self._evict(request)
        if action == enums.action.UPDATE and isinstance(request.data, dict) and "resourceVersion" in (
                request.data.get("metadata") or {}):
            return await self._patch_guarded(request)
        early: aiohttp.web.Response | None = None
        if action in (enums.action.LIST, enums.action.WATCH):
            try:
                parse_selector(request.params.get("labelSelector", ""))
                parse_field_selector(request.params.get("fieldSelector", ""))
            except ValueError as e:
                early = status_response(400, "BadRequest", str(e))
        elif action == enums.action.CREATE and isinstance(request.data, dict):
            early = self._stamp(request, request.data)
        elif action == enums.action.UPDATE and isinstance(request.data, dict):
            request.data.setdefault("metadata", {})["resourceVersion"] = self._next_rv()
        elif action == enums.action.DELETE and request.name:
            early = self._check_preconditions(request)
        if early is not None:
            return early
        response = await super()._handle(request)
        if action == enums.action.CREATE and response.status == 200 and not response.prepared:
            response.set_status(201)
        return response

    def _stamp(self, request: rendering.Request, data: dict[str, Any]) -> aiohttp.web.Response | None:
        """Fill server-side metadata on create; return a 422 response when the object has no name."""
        assert request.resource is not None
        kind, namespaced = _kind(request.resource)
        meta = data.setdefault("metadata", {})
        if request.namespace and namespaced:
            meta.setdefault("namespace", request.namespace)
        if not meta.get("name") and meta.get("generateName"):
            # 10 hex digits: a kube-apiserver >= 1.32 retries a generated name that is taken (RetryGenerateName), so
            # two creates never clash there; 5 did here (64 Events of one object: a 409 now and then)
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:10]
        if not meta.get("name"):
            return status_response(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        data.setdefault("apiVersion", _api_version(request.resource))
        data.setdefault("kind", kind)
        meta.update(uid=str(uuid.uuid4()), resourceVersion=self._next_rv(),
                    creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        return None

    def _check_preconditions(self, request: rendering.Request) -> aiohttp.web.Response | None:
        pre = request.data.get("preconditions") if isinstance(request.data, dict) else None
        stored = self._object(request)
        if not isinstance(pre, dict) or stored is None:
            return None  # no preconditions, or kmock answers the 404
        meta = stored.raw.get("metadata") or {}
        details = {"name": request.name, "kind": request.resource.plural if request.resource else ""}
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            want = pre.get(field)
            if want is not None and want != meta.get(field):
                return status_response(409, "Conflict", f"Precondition failed: {label} in precondition: {want}, "
                               f"{label} in object meta: {meta.get(field, '')}", details)
        return None

    async def _replace(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None
        body = request.data
        if not isinstance(body, dict):
            return status_response(400, "BadRequest", "the body of a replace (PUT) must be a JSON object")
        details = {"name": request.name, "kind": request.resource.plural}
        async with self._lock:
            stored = self._object(request)
            if stored is None:
                return not_found(details)
            meta = stored.raw.get("metadata") or {}
            new_meta = body.setdefault("metadata", {})
            if new_meta.get("resourceVersion") not in (None, "", meta.get("resourceVersion")):
                return status_response(409, "Conflict", f'Operation cannot be fulfilled on {request.resource.plural} '
                               f'"{request.name}": the object has been modified', details)
            new_meta.update({f: meta[f] for f in ("uid", "creationTimestamp", "namespace", "name") if f in meta})
            new_meta["resourceVersion"] = self._next_rv()
            body.setdefault("apiVersion", stored.raw.get("apiVersion"))
            body.setdefault("kind", stored.raw.get("kind"))
            stored.history.append(body)
            await self._buses[request.resource].put({"type": "MODIFIED", "object": body})
        return aiohttp.web.json_response(body)

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        items, meta = page(await self._selected(request), str(self._head), request.params.get("limit"),
                           request.params.get("continue"))
        return {"apiVersion": _api_version(request.resource), "kind": f"{_kind(request.resource)[0]}List",
                "metadata": meta, "items": items}

    async def _selected(self, request: rendering.Request) -> list[dict[str, Any]]:
        """The stored objects the request's path, label and field selectors pick (one consistent snapshot)."""
        payload = await super()._serve_list(request)
        assert isinstance(payload, dict)
        requirements = parse_selector(request.params.get("labelSelector", ""))
        fields = parse_field_selector(request.params.get("fieldSelector", ""))
        return [i for i in payload["items"] if selector_matches(requirements, labels_of(i)) and fields_match(fields, i)]

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        """See :mod:`.watches`: from ``resourceVersion`` (410 once compacted) or from the current objects."""
        assert request.resource is not None
        yield b""  # the headers go out at once, even when nothing happens
        requirements = parse_selector(request.params.get("labelSelector", ""))
        fields = parse_field_selector(request.params.get("fieldSelector", ""))

        def match(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            return (request.namespace in (None, meta.get("namespace")) and request.name in (None, meta.get("name"))
                    and selector_matches(requirements, labels_of(obj)) and fields_match(fields, obj))

        log = cast(EventLog, self._buses[request.resource])
        since = request.params.get("resourceVersion") or "0"
        if since == "0":  # the current objects first (one consistent snapshot), then what happens next
            current = await self._selected(request)
            start = log.end
            for obj in current:
                yield {"type": "ADDED", "object": obj}
        else:
            after = log.seq_after(int(since)) if since.isdigit() else None
            if after is None:
                yield expired(since, log.floor)
                return
            start = after
        timeout = request.params.get("timeoutSeconds")
        bookmarks = true(request.params.get("allowWatchBookmarks"))
        kind = {"kind": _kind(request.resource)[0], "apiVersion": _api_version(request.resource)}
        spec = WatchSpec(log, match, start, lambda: self._head, kind if bookmarks else None, self.bookmark_interval_s,
                         asyncio.get_running_loop().time() + float(timeout) if timeout else None)
        async for event in stream(spec):
            yield event

    async def _evict(self, request: rendering.Request) -> aiohttp.web.Response:
        """Serve ``POST /api/v1/namespaces/NS/pods/NAME/eviction``: checks and deletion are atomic under the lock."""
        assert request.resource is not None
        body = request.data if isinstance(request.data, dict) else {}
        options = body.get("deleteOptions") or {}
        details = {"name": request.name, "kind": "pods"}
        if not isinstance(options, dict) or (body.get("metadata") or {}).get("name") not in (None, request.name):
            return status_response(400, "BadRequest", "the Eviction body does not match the pod in the URL", details)
        as_delete = attrs.evolve(request, method=enums.method.DELETE, action=enums.action.DELETE, subresource=None,
                                 data=options)
        async with self._lock:
            stored = self._object(as_delete)
            if stored is None:
                return status_response(404, "NotFound", f'pods "{request.name}" not found', details)
            failed = self._check_preconditions(as_delete)
            if failed is not None:
                return failed
            if f"{request.namespace}/{request.name}" in self.several_pdbs:  # the real API server's answer
                return status_response(500, "InternalError", "Internal error occurred: This pod has more than one "
                                       "PodDisruptionBudget, which the eviction subresource does not support.",
                                       details)
            if eviction_is_blocked(self.eviction_blocked, request.namespace, request.name):
                causes = [{"reason": "DisruptionBudget", "message": "The disruption budget (emulated) needs 1 healthy "
                           "pods and has 1 currently"}]
                return status_response(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                       "disruption budget.", {**details, "causes": causes})
            if (stored.raw.get("metadata") or {}).get("finalizers"):  # as kmock's DELETE: mark, do not remove
                stored.patch({"metadata": {"deletionTimestamp": datetime.datetime.now(datetime.UTC).isoformat()}})
                event = {"type": "MODIFIED", "object": stored.raw}
            else:
                stored.delete()
                event = {"type": "DELETED", "object": stored.last.raw}
            await self._buses[request.resource].put(event)
        return aiohttp.web.json_response(EVICTED, status=201)

    async def _patch_guarded(self, request: rendering.Request) -> aiohttp.web.Response:
        """Serve a merge PATCH whose body has ``metadata.resourceVersion``: 409 unless it is the stored one."""
        assert request.resource is not None and isinstance(request.data, dict)
        details = {"name": request.name, "kind": request.resource.plural}
        async with self._lock:
            stored = self._object(request)
            if stored is None:
                return not_found(details)
            meta = request.data.setdefault("metadata", {})
            if meta.get("resourceVersion") != (stored.raw.get("metadata") or {}).get("resourceVersion"):
                return status_response(409, "Conflict", f'Operation cannot be fulfilled on {request.resource.plural} '
                                       f'"{request.name}": the object has been modified; please apply your changes '
                                       "to the latest version and try again", details)
            meta["resourceVersion"] = self._next_rv()
            stored.patch(request.data)
            raw = stored.raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)

    def _forget_request(self, request: rendering.Request) -> None:
        """Drop a served ``request`` from kmock's request histories (the root's and each reaction's): kmock matches
        every new request by scanning them all, which made each request O(requests so far) and kept every body in
        memory. ``KubeEmulator.request_log`` is the record to assert on."""
        for holder in (self, *self._payloads):
            seen: list[rendering.Request] = getattr(holder, "_requests", [])
            for i in range(len(seen) - 1, -1, -1):
                if seen[i] is request:
                    del seen[i]
                    break


class EmulatorServer(EmulatorClient):
    """Run a :class:`KubeEmulator` over HTTP in a background thread with its own asyncio loop (for sync code).

    ``with EmulatorServer() as srv:`` starts it; ``srv.base_url`` is ``http://127.0.0.1:PORT`` (no auth);
    ``srv.emulator`` is the emulator itself (``request_log``, ``count_requests``).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self.host, self.port = host, port
        self.emulator = KubeEmulator()
        self._thread: threading.Thread | None = None
        self._ready, self._stop = threading.Event(), threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout_s: float = 10.0) -> str:
        """Start serving; return the base URL. Raises EmulatorError if it is not up within ``timeout_s``."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="kube-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise EmulatorError(f"emulator did not start on {self.host}:{self.port}: {self._error!r}")
        return self.base_url

    async def _main(self) -> None:
        try:
            async with self.emulator, kmock.Server(self.emulator, host=self.host, port=self.port or None) as srv:
                self.port, self.base_url = srv.port, f"http://{self.host}:{srv.port}"
                if srv.server.runner is not None:  # open watches would hold stop() for aiohttp's default 60 s
                    srv.server.runner._shutdown_timeout = 0.5
                # The executor's thread starts inside run_in_executor: start it before saying ready, so a
                # caller that counts threads after start() sees every thread this server will have.
                stopped = asyncio.get_running_loop().run_in_executor(None, self._stop.wait)
                self._ready.set()
                await stopped
        except BaseException as e:  # reported by start(); the thread ends either way
            self._error = e
            self._ready.set()

    def stop(self) -> None:
        """Stop serving and join the thread (at most ~10 s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> EmulatorServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

