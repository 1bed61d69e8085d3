"""I/O: the official ``kubernetes`` client behind a small interface that returns plain dicts (API JSON).

Every call sends exactly one HTTP request with a bounded timeout (``KubeSettings.request_timeout_s``, total per
request), reads the body with ``_preload_content=False`` and ``json.loads`` (no model deserialization; a LIST page
in chunks, never past the byte cap it is given: :class:`TooLarge`), and never retries (urllib3 retries are disabled,
so a DELETE is sent at most once). Failures raise :class:`KubeError` except where a method documents a result value
(404 -> None / "not_found", 409 -> "conflict", 429 -> "blocked"). Every answer's status is told to
:attr:`KubeClient.credentials` (:mod:`watchdog.adapters.kubeauth`: whether the API server refuses the credentials; a
401 re-reads the token), but a 403 that a tenant's own namespace can cause: an Event's create (its quota) and the
LIST/WATCH of the pods of one namespace (namespace-only mode: the RoleBinding there is the tenant's to delete, the
namespace to remove). Every answer's HTTP ``Date`` header is the API server's clock
(:meth:`KubeClient.server_time`): the one clock every replica shares.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from watchdog.adapters.kubeauth import Credentials
from watchdog.adapters.podlog import read_bounded
from watchdog.core.owners import owner_path

DeleteResult = Literal["deleted", "not_found", "conflict"]
Watched = Literal["pods", "namespaces"]  # what list_page / watch serve (the pod cache)
EvictResult = Literal["evicted", "not_found", "conflict", "blocked", "several_pdbs"]
PatchResult = Literal["patched", "not_found", "conflict"]


class KubeError(Exception):
    """A Kubernetes API call failed. ``str()`` is one line: call, HTTP status (0 if none), reason, message."""

    def __init__(self, call: str, status: int, reason: str, message: str = "") -> None:
        self.call, self.status, self.reason, self.message = call, status, reason, message
        text = f"{call}: HTTP {status} {reason}" if status else f"{call}: {reason}"
        text = f"{text}: {message}" if message else text
        super().__init__(" ".join(text.split())[:300])


class TooLarge(KubeError):
    """An answer above ``cap`` bytes, given up as soon as ``read`` bytes (above the cap by at most one chunk) were
    read; the message names its Content-Length when it declared one."""

    def __init__(self, call: str, cap: int, read: int, declared: str | None) -> None:
        self.cap, self.read = cap, read
        size = f"Content-Length {declared}" if declared else "no Content-Length"
        super().__init__(call, 0, f"answer above {cap} bytes (stopped reading at {read}; {size})")


class Fenced(Exception):
    """A write was not sent: this replica's Lease may not outlast it (a standby, or a leader that lost touch).
    Raised by the actuator (watchdog.controller.actuator) before the request leaves."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} not sent: this replica's leader Lease may not outlast the request")


@dataclass(frozen=True)
class KubeSettings:
    """How to reach the API server.

    ``host``: a plain base URL such as ``http://127.0.0.1:PORT`` without auth (tests/demo against the emulator);
    wins over everything else. ``kubeconfig``/``context``: a kubeconfig file and optional context. Neither:
    in-cluster service account, then the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
    ``request_timeout_s``: total timeout of each request, seconds."""

    kubeconfig: str | None = None
    context: str | None = None
    host: str | None = None
    request_timeout_s: float = 10.0


def _what(verb: str, resource: Watched, label_selector: str, namespace: str | None) -> str:
    return f"{verb} {resource} {label_selector!r}" + (f" in {namespace}" if namespace else "")


class WatchStream:
    """The events of one open WATCH, decoded one line at a time (never the client's models). Iterating raises
    KubeError: an ``ERROR`` event with its code as the status (410: the resourceVersion expired), or the
    connection failing (status 0). :meth:`close` may be called from another thread to cut it short."""

    def __init__(self, what: str, response: Any) -> None:
        self.what, self._response = what, response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in iter_resp_lines(self._response):
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise KubeError(self.what, int(status.get("code") or 0), str(status.get("reason") or "error"),
                                    str(status.get("message") or ""))
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubeError(self.what, 0, f"{type(e).__name__}: {e}") from e
        except ValueError as e:
            raise KubeError(self.what, 0, f"invalid JSON in the event stream: {e}") from e
        finally:
            self.close()

    def close(self) -> None:
        for step in ("shutdown", "close", "release_conn"):  # shutdown unblocks a read in another thread
            with contextlib.suppress(Exception):  # already closed, or the socket is gone
                getattr(self._response, step)()


_CHUNK = 64 * 1024  # bytes asked of urllib3 at a time when reading a capped answer


def _read_capped(resp: Any, call: str, cap: int) -> bytearray:
    """The body of the urllib3 response ``resp``, read in chunks; TooLarge (the connection closed, the rest never
    read) as soon as the bytes read exceed ``cap``: at most ``cap`` + one chunk is ever held."""
    body = bytearray()  # grows in place: no second copy, as joining chunks would make
    while chunk := resp.read1(_CHUNK):
        body += chunk
        if len(body) > cap:
            resp.close()
            raise TooLarge(call, cap, len(body), resp.headers.get("Content-Length"))
    return body


def _message(body: Any) -> str:
    """The ``message`` of a Status body, else a short excerpt of the body."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return " ".join(str(body).split())[:120]
    return str(parsed.get("message", ""))[:200] if isinstance(parsed, dict) else str(body)[:200]


def _delete_options(uid: str, grace_period_s: int | None) -> dict[str, Any]:
    """DeleteOptions that apply only while the pod's ``metadata.uid`` is ``uid`` (preconditions), with
    ``grace_period_s`` (None: the pod's own grace period)."""
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    if grace_period_s is not None:
        options["gracePeriodSeconds"] = grace_period_s
    return options


def _configuration(s: KubeSettings) -> client.Configuration:
    """The client configuration for ``s`` (see :class:`KubeSettings`); raise KubeError if none can be loaded."""
    cfg = client.Configuration()
    if s.kubeconfig and not os.path.isfile(s.kubeconfig):
        raise KubeError("load configuration", 0, f"kubeconfig {s.kubeconfig!r}: no such file")
    try:
        if s.host:
            cfg.host = s.host.rstrip("/")
        elif s.kubeconfig:
            config.load_kube_config(config_file=s.kubeconfig, context=s.context, client_configuration=cfg)
        else:
            try:
                config.load_incluster_config(client_configuration=cfg)
            except ConfigException as in_cluster:
                try:
                    config.load_kube_config(context=s.context, client_configuration=cfg)
                except Exception as kubeconfig:  # missing, malformed (YAML, types) or incomplete
                    raise KubeError("load configuration", 0, f"not in a cluster ({in_cluster}) and no usable "
                                    f"kubeconfig ({kubeconfig})") from kubeconfig
    except KubeError:
        raise
    except Exception as e:  # the loader raises YAML, type and attribute errors on malformed files too
        what = f"kubeconfig {s.kubeconfig!r}" if s.kubeconfig else "kubeconfig"
        raise KubeError("load configuration", 0, f"{what}: unusable ({type(e).__name__}: {e})") from e
    cfg.retries = urllib3.Retry(total=0, redirect=False, raise_on_status=False)
    return cfg


class KubeClient:
    """Thread-safe wrapper of one ``kubernetes.client.ApiClient``; build it with :meth:`from_settings`."""

    def __init__(self, api_client: client.ApiClient, request_timeout_s: float) -> None:
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        self._api = api_client
        self.credentials = Credentials(api_client.configuration)  # accepted or refused (401/403), and re-read
        self._core = client.CoreV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._timeout = request_timeout_s
        self._count = 0
        self._count_lock = threading.Lock()
        self._dated: tuple[float, float] | None = None  # (the API server's Date, monotonic time it was received)

    @classmethod
    def from_settings(cls, s: KubeSettings) -> KubeClient:
        """Build a client (see :class:`KubeSettings`); raise KubeError if no configuration can be loaded. A 401
        loads the configuration again the same way (:mod:`watchdog.adapters.kubeauth`: a rotated token)."""
        kube = cls(client.ApiClient(_configuration(s)), s.request_timeout_s)
        if not s.host:
            kube.credentials.reload_with(lambda: _configuration(s))
        return kube

    @property
    def api_requests(self) -> int:
        """API requests sent by this client so far (including failed ones)."""
        return self._count

    def server_time(self) -> float | None:
        """The API server's clock now (Unix seconds): the ``Date`` of its latest answer (whole seconds, so half a
        second is added) plus the monotonic seconds since it came; None before any dated answer. Never the local
        wall clock: two replicas whose clocks disagree stamp and age the deletion ledger alike."""
        dated = self._dated
        return None if dated is None else dated[0] + 0.5 + (time.monotonic() - dated[1])

    def _note_date(self, headers: Any) -> None:
        try:
            when = email.utils.parsedate_to_datetime(str(headers.get("Date"))).timestamp()
        except (TypeError, ValueError, AttributeError):  # no Date header, or not an HTTP date: nothing learnt
            return
        self._dated = (when, time.monotonic())

    @contextlib.contextmanager
    def _request(self, what: str, *, tenant_refusable: bool = False) -> Iterator[None]:
        """One API request: counted, its answer told to :attr:`credentials`, and its failure as KubeError
        (ApiException keeps its status). ``tenant_refusable``: a 403 may come from the tenant's own namespace (its
        ResourceQuota, an admission webhook, its RoleBinding deleted), not from this watchdog's credentials: such a
        403 is not told."""
        with self._count_lock:
            self._count += 1
        try:
            yield
        except ApiException as e:
            self._note_date(e.headers)  # a refusal is dated too
            if not (tenant_refusable and e.status == 403):
                self.credentials.answered(what, e.status or 0)
            raise KubeError(what, e.status or 0, str(e.reason or "error"), _message(e.body)) from e
        except urllib3.exceptions.HTTPError as e:
            reason = getattr(e, "reason", None) or e
            raise KubeError(what, 0, f"{type(reason).__name__}: {reason}") from e
        self.credentials.answered(what, 200)

    def _call(self, what: str, fn: Any, *args: Any, _tenant_refusable: bool = False, _max_bytes: int | None = None,
              **kwargs: Any) -> dict[str, Any]:
        """Run one API call; return the decoded JSON body (TooLarge above ``_max_bytes``, never read past it).
        Raise KubeError (ApiException keeps its status)."""
        with self._request(what, tenant_refusable=_tenant_refusable):
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            self._note_date(resp.headers)
            try:
                data = resp.data if _max_bytes is None else _read_capped(resp, what, _max_bytes)
            finally:
                resp.release_conn()
        try:
            body: dict[str, Any] = json.loads(data) if data else {}
        except ValueError as e:
            raise KubeError(what, 0, f"invalid JSON in response: {e}") from e
        return body

    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]:
        """Namespaces matching ``label_selector`` ("" = all); one request served from the watch cache."""
        body = self._call(f"list namespaces {label_selector!r}", self._core.list_namespace,
                          label_selector=label_selector, resource_version="0")
        return list(body.get("items") or [])

    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        """Pods matching ``label_selector`` ("" = all), of every namespace in ONE request, or of each of
        ``namespaces`` (namespace-only mode: one request each); ``resourceVersion=0`` (served from the apiserver's
        watch cache, possibly slightly stale; use :meth:`get_pod` before acting)."""
        if namespaces is None:
            body = self._call(f"list pods {label_selector!r}", self._core.list_pod_for_all_namespaces,
                              label_selector=label_selector, resource_version="0")
            return list(body.get("items") or [])
        return [pod for namespace in namespaces
                for pod in self._call(f"list pods {label_selector!r} in {namespace}", self._core.list_namespaced_pod,
                                      namespace, label_selector=label_selector, resource_version="0",
                                      _tenant_refusable=True).get("items") or []]

    def list_page(self, resource: Watched, label_selector: str, limit: int, token: str | None,
                  namespace: str | None = None, *, max_bytes: int) -> dict[str, Any]:
        """One page of a paged LIST (``limit`` items, ``token``: the previous page's ``metadata.continue``),
        a consistent read (no ``resourceVersion``: the API server pages only those), of every namespace or of
        pods in ``namespace`` (a 403 there is that namespace's RoleBinding, not the credentials). The body is read
        in chunks and decoded; :class:`TooLarge` as soon as it exceeds ``max_bytes`` (tenants size their pods)."""
        return self._call(_what("list", resource, label_selector, namespace), self._listing(resource, namespace),
                          label_selector=label_selector, limit=limit, _continue=token,
                          _tenant_refusable=namespace is not None, _max_bytes=max_bytes)

    def watch(self, resource: Watched, label_selector: str, resource_version: str, timeout_s: int,
              namespace: str | None = None) -> WatchStream:
        """Open one WATCH (counted as a request) from ``resource_version``, with bookmarks; the API server ends it
        after ``timeout_s``, and a silent connection is given up ``timeout_s`` + 30 s after its last byte."""
        what = _what("watch", resource, label_selector, namespace)
        with self._request(what, tenant_refusable=namespace is not None):
            resp = self._listing(resource, namespace)(
                label_selector=label_selector, resource_version=resource_version, watch=True,
                allow_watch_bookmarks=True, timeout_seconds=timeout_s, _preload_content=False,
                _request_timeout=(self._timeout, timeout_s + 30))
        return WatchStream(what, resp)

    def _listing(self, resource: Watched, namespace: str | None) -> Any:
        """The LIST/WATCH call of ``resource``: pods of every namespace, or of ``namespace`` only; namespaces."""
        if resource == "namespaces":
            return self._core.list_namespace
        if namespace is None:
            return self._core.list_pod_for_all_namespaces
        return functools.partial(self._core.list_namespaced_pod, namespace)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A fresh read of one pod (quorum read, never cached); None when it does not exist (404)."""
        return self._get(f"get pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace)

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        """A fresh read of one namespace (its opt-in label, right before a deletion); None when it is gone."""
        return self._get(f"get namespace {name}", self._core.read_namespace, name)

    def _get(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        try:
            return self._call(what, fn, *args, **kwargs)
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> DeleteResult:
        """Delete a pod only if its ``metadata.uid`` is still ``uid`` (DeleteOptions preconditions).

        Returns "deleted" (2xx), "not_found" (404: already gone) or "conflict" (409: the uid differs, i.e. the
        name now belongs to a new pod). ``grace_period_s`` None keeps the pod's own grace period. Sent once,
        never retried; raises KubeError on anything else (5xx, 403, timeout, connection error)."""
        try:
            self._call(f"delete pod {namespace}/{name}", self._core.delete_namespaced_pod, name, namespace,
                       body=_delete_options(uid, grace_period_s))
        except KubeError as e:
            if e.status == 404:
                return "not_found"
            if e.status == 409:
                return "conflict"
            raise
        return "deleted"

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """GET one owner object (ReplicaSet, Deployment, StatefulSet, ... in ``namespace``) for the owner walk.

        Only the kinds of :data:`watchdog.core.owners.OWNER_KINDS`, all namespaced; the path is built from that
        table and from ``namespace`` and ``name`` only once they are valid Kubernetes names (owner references are
        tenant text: a kind or name carrying ``/``, ``..`` or ``?`` must never become a path). Raises ValueError,
        sending nothing, for anything else. None on 404; raises KubeError otherwise.
        """
        path = owner_path(api_version, kind, namespace, name)
        if path is None:
            raise ValueError(f"not a known owner kind or not a valid name: {api_version!r} {kind!r} "
                             f"{namespace!r} {name!r}"[:300])
        return self._get(f"get {kind} {namespace}/{name}", self._api.call_api, path, "GET",
                         header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        """Create a core/v1 Event in ``namespace``; raises KubeError on failure (callers treat it as best effort)."""
        self._call(f"create event in {namespace}", self._core.create_namespaced_event, namespace, body,
                   _tenant_refusable=True)  # a tenant's Event quota may refuse it: not a credentials refusal

    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> EvictResult:
        """Evict a pod (policy/v1 Eviction) only if its ``metadata.uid`` is still ``uid``.

        Unlike :meth:`delete_pod`, the apiserver first checks the pod's PodDisruptionBudgets. Returns "evicted"
        (2xx), "not_found" (404), "conflict" (409: the uid differs), "blocked" (429: a PodDisruptionBudget
        would be violated, or the eviction API is throttled; try again in a later cycle) or "several_pdbs" (the
        API server's 500 for a pod selected by more than one PodDisruptionBudget, which eviction does not
        support). ``grace_period_s`` None keeps the pod's own grace period. Sent once, never retried; raises
        KubeError on anything else."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": _delete_options(uid, grace_period_s)}
        try:
            self._call(f"evict pod {namespace}/{name}", self._core.create_namespaced_pod_eviction, name, namespace,
                       body)
        except KubeError as e:
            results: dict[int, EvictResult] = {404: "not_found", 409: "conflict", 429: "blocked"}
            if e.status in results:
                return results[e.status]
            if e.status == 500 and "more than one PodDisruptionBudget" in e.message:
                return "several_pdbs"  # a definite refusal, not a lost answer: nothing was applied
            raise
        return "evicted"

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A coordination.k8s.io/v1 Lease (quorum read); None when it does not exist (404)."""
        return self._get(f"get lease {namespace}/{name}", self._coordination.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Lease in ``namespace``; return it as stored. Raises KubeError (status 409 if it exists)."""
        name = (body.get("metadata") or {}).get("name", "")
        return self._call(f"create lease {namespace}/{name}", self._coordination.create_namespaced_lease, namespace,
                          body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a Lease; ``body["metadata"]["resourceVersion"]`` must be the one read (optimistic concurrency).
        Returns the stored Lease; raises KubeError (status 409 when someone else wrote it first, 404 if gone)."""
        return self._call(f"replace lease {namespace}/{name}", self._coordination.replace_namespaced_lease, name,
                          namespace, body)

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap (quorum read); None when it does not exist (404)."""
        return self._get(f"get configmap {namespace}/{name}", self._core.read_namespaced_config_map, name, namespace)

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a ConfigMap; raises KubeError (409 when it exists)."""
        name = (body.get("metadata") or {}).get("name", "")
        return self._call(f"create configmap {namespace}/{name}", self._core.create_namespaced_config_map, namespace,
                          body)

    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a ConfigMap with the ``metadata.resourceVersion`` read (409 when someone wrote it first)."""
        return self._call(f"replace configmap {namespace}/{name}", self._core.replace_namespaced_config_map, name,
                          namespace, body)

    def get_node(self, name: str) -> dict[str, Any] | None:
        """A Node (quorum read); None when it does not exist (404)."""
        return self._get(f"get node {name}", self._core.read_node, name)

    def patch_node_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        """Set a Node's ``spec.taints`` to exactly ``taints`` (JSON merge patch replaces the whole list, so pass
        the taints read plus the new one) if the Node is still at ``resource_version``; returns the patched Node.

        Raises KubeError: status 409 when the Node changed since it was read (re-read and decide again),
        404 when it is gone, others as they come. Sent once, never retried.
        """
        if not resource_version:
            raise ValueError("patch_node_taints needs the resourceVersion the taints were read at")
        patch = {"metadata": {"resourceVersion": resource_version}, "spec": {"taints": taints}}
        return self._call(f"patch node {name} taints", self._core.patch_node, name, patch,
                          _content_type="application/merge-patch+json")

    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, Any]) -> PatchResult:
        """Set one pod condition (``status.conditions[]``, merged by ``type``) through ``pods/status`` with a
        strategic-merge patch that carries ``metadata.uid``: the API server refuses it (422, uid immutable) when
        the name now belongs to another pod. Returns "patched", "not_found" (404: the pod is gone) or "conflict"
        (409, or that 422: another pod under the name). Sent once; raises KubeError on anything else."""
        patch = {"metadata": {"uid": uid}, "status": {"conditions": [condition]}}
        try:
            self._call(f"patch pod {namespace}/{name} status", self._core.patch_namespaced_pod_status, name,
                       namespace, patch, _content_type="application/strategic-merge-patch+json")
        except KubeError as e:
            if e.status == 404:
                return "not_found"
            if e.status == 409 or (e.status == 422 and "metadata.uid" in e.message):
                return "conflict"
            raise
        return "patched"

    def read_pod_log(self, namespace: str, name: str, container: str, lines: int, limit_bytes: int) -> bytes:
        """The newest ``limit_bytes`` of the last ``lines`` lines of ``container``'s log (pods/log; no limitBytes:
        the API would keep the oldest), read within the request timeout. Raises KubeError."""
        deadline = time.monotonic() + self._timeout
        with self._request(f"read log of pod {namespace}/{name}"):
            resp = self._core.read_namespaced_pod_log(name, namespace, container=container or None, tail_lines=lines,
                                                      _preload_content=False, _request_timeout=self._timeout)
            try:
                return read_bounded(resp, deadline, limit_bytes)
            finally:
                resp.release_conn()
