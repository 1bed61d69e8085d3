"""Selectors, the pod ``eviction`` subresource and resourceVersion-guarded merge patches for the API emulator.

Split out of :mod:`watchdog.demo.emulator` (server, seeding client, request hooks) to keep both modules small.
Still an emulator, not a cluster:

- ``labelSelector``: ``a=b``, ``a!=b``, ``a``, ``!a``, ``a in (x)``, ``a notin (x)``.
- ``fieldSelector``: ``path=value``, ``path==value``, ``path!=value`` joined by ``,`` (AND); ``path`` is any
  dotted JSON path (``reason``, ``involvedObject.kind``, ``metadata.name``, ``spec.nodeName``); a missing field
  reads as ``""``. A real apiserver accepts only a few fields per resource and answers 400 for others.
- ``POST .../pods/NAME/eviction`` (policy/v1 Eviction): 404 for a missing pod, 409 when
  ``deleteOptions.preconditions`` (uid, resourceVersion) fail, 429 ``TooManyRequests`` while
  ``KubeEmulator.eviction_blocked`` says a PodDisruptionBudget blocks it (no PDB objects are emulated), else
  the pod is deleted like a DELETE and the answer is 201 with a ``Success`` Status.
- ``PATCH`` whose body carries ``metadata.resourceVersion``: 409 Conflict unless it equals the stored one
  (the check and the write are atomic under the emulator's lock).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp.web
import attrs
from kmock._internal import enums, rendering

if TYPE_CHECKING:
    from watchdog.demo.emulator import KubeEmulator

Requirement = tuple[str, str, frozenset[str]]  # (key, "in" | "notin" | "exists" | "!exists", values)
FieldRequirement = tuple[str, bool, str]  # (dotted path, True for = / False for !=, value)
_SET_TERM = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s*\((.*)\)$")
_FIELD_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
#: Answer of an allowed eviction (policy/v1 returns 201 with a Success Status).
EVICTED = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201}


def parse_selector(selector: str) -> list[Requirement]:
    """Parse a label selector (``a=b,c!=d,e,!f,g in (x,y),h notin (z)``); raise ValueError when malformed."""
    result: list[Requirement] = []
    for raw in (t.strip() for t in re.split(r",(?![^()]*\))", selector)):
        if not raw:
            continue
        if match := _SET_TERM.match(raw):
            key, op = match.group(1), match.group(2)
            values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
        elif raw.startswith("!"):
            key, op, values = raw[1:], "!exists", frozenset()
        elif "=" in raw:
            key, sep, value = raw.replace("==", "=", 1).partition("!=" if "!=" in raw else "=")
            op, values = ("notin" if sep == "!=" else "in"), frozenset([value.strip()])
        else:
            key, op, values = raw, "exists", frozenset()
        key = key.strip()
        if not key or any(c in key for c in " =!(),"):
            raise ValueError(f"unable to parse requirement {raw!r} in label selector {selector!r}")
        result.append((key, op, values))
    return result


def selector_matches(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    """True when ``labels`` satisfy every requirement (``!=``/``notin`` also match an absent key)."""
    get = (labels or {}).get
    return all({"in": get(k) in vs, "notin": get(k) not in vs, "exists": get(k) is not None,
                "!exists": get(k) is None}[op] for k, op, vs in requirements)


def labels_of(obj: Any) -> Mapping[str, str]:
    """``metadata.labels`` of an API object ({} when absent or not an object)."""
    return ((obj.get("metadata") or {}).get("labels") or {}) if isinstance(obj, dict) else {}


def parse_field_selector(selector: str) -> list[FieldRequirement]:
    """Parse ``a.b=x,c!=y,d==z`` (AND of terms); raise ValueError with a one-line message when malformed."""
    result: list[FieldRequirement] = []
    for raw in (t.strip() for t in selector.split(",")):
        if not raw:
            continue
        equal = "!=" not in raw
        key, sep, value = raw.replace("==", "=", 1).partition("=" if equal else "!=")
        if not sep or not _FIELD_PATH.match(key.strip()) or "=" in value:
            raise ValueError(f"invalid field selector {selector!r}: term {raw!r} is not path=value or path!=value")
        result.append((key.strip(), equal, value.strip()))
    return result


def field_value(obj: Any, path: str) -> str:
    """The value at dotted ``path`` as a selector compares it: strings as is, booleans lower-case, "" if absent."""
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    if obj is None or isinstance(obj, dict | list):
        return ""
    return str(obj).lower() if isinstance(obj, bool) else str(obj)


def fields_match(requirements: list[FieldRequirement], obj: Any) -> bool:
    """True when ``obj`` satisfies every field requirement."""
    return all((field_value(obj, path) == value) == equal for path, equal, value in requirements)


def forget_request(emu: KubeEmulator, request: rendering.Request) -> None:
    """Drop a served ``request`` from kmock's request histories (the root's and each reaction's): kmock matches
    every new request by scanning them all, which made each request O(requests so far) and kept every body in
    memory. ``KubeEmulator.request_log`` is the record to assert on."""
    for holder in (emu, *emu._payloads):
        seen: list[rendering.Request] = getattr(holder, "_requests", [])
        for i in range(len(seen) - 1, -1, -1):
            if seen[i] is request:
                del seen[i]
                break


def status_response(code: int, reason: str, message: str, details: dict[str, Any] | None = None
                    ) -> aiohttp.web.Response:
    """A ``Status`` failure body as the apiserver sends it."""
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}
    return aiohttp.web.json_response(body, status=code)


def eviction_is_blocked(blocked: bool | Collection[str], namespace: str | None, name: str | None) -> bool:
    """``blocked`` is True (every eviction), False, or a collection of ``"namespace/name"`` pod references."""
    return blocked if isinstance(blocked, bool) else f"{namespace}/{name}" in blocked


async def evict(emu: KubeEmulator, request: rendering.Request) -> aiohttp.web.Response:
    """Serve ``POST /api/v1/namespaces/NS/pods/NAME/eviction``: checks and deletion are atomic under the lock."""
    assert request.resource is not None
    body = request.data if isinstance(request.data, dict) else {}
    options = body.get("deleteOptions") or {}
    details = {"name": request.name, "kind": "pods"}
    if not isinstance(options, dict) or (body.get("metadata") or {}).get("name") not in (None, request.name):
        return status_response(400, "BadRequest", "the Eviction body does not match the pod in the URL", details)
    as_delete = attrs.evolve(request, method=enums.method.DELETE, action=enums.action.DELETE, subresource=None,
                             data=options)
    async with emu._lock:
        stored = emu._object(as_delete)
        if stored is None:
            return status_response(404, "NotFound", f'pods "{request.name}" not found', details)
        failed = emu._check_preconditions(as_delete)
        if failed is not None:
            return failed
        if eviction_is_blocked(emu.eviction_blocked, request.namespace, request.name):
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
        await emu._buses[request.resource].put(event)
    return aiohttp.web.json_response(EVICTED, status=201)


async def patch_guarded(emu: KubeEmulator, request: rendering.Request) -> aiohttp.web.Response:
    """Serve a merge PATCH whose body has ``metadata.resourceVersion``: 409 unless it is the stored one."""
    assert request.resource is not None and isinstance(request.data, dict)
    details = {"name": request.name, "kind": request.resource.plural}
    async with emu._lock:
        stored = emu._object(request)
        if stored is None:
            return status_response(404, "NotFound", f'{request.resource.plural} "{request.name}" not found', details)
        meta = request.data.setdefault("metadata", {})
        if meta.get("resourceVersion") != (stored.raw.get("metadata") or {}).get("resourceVersion"):
            return status_response(409, "Conflict", f'Operation cannot be fulfilled on {request.resource.plural} '
                                   f'"{request.name}": the object has been modified; please apply your changes '
                                   "to the latest version and try again", details)
        meta["resourceVersion"] = emu._next_rv()
        stored.patch(request.data)
        raw = stored.raw
        await emu._buses[request.resource].put({"type": "MODIFIED", "object": raw})
    return aiohttp.web.json_response(raw)
