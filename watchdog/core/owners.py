"""The owners the watchdog resolves, and how it checks them. Pure: no I/O.

A pod's ``ownerReferences`` (and its ReplicaSet's) are written by whoever may create pods in the namespace: the API
server checks only that apiVersion, kind, name and uid are not empty. So an owner is resolved only when

- its (apiVersion, kind) is in :data:`OWNER_KINDS`, a fixed table of namespaced workload kinds: the request path
  is built from the table (group, version, plural), never from the reference's text; any other kind (a Node, a
  Namespace, a custom resource, a Secret, a path) stops the walk;
- its name is a Kubernetes object name (DNS-1123 subdomain, at most 253 characters) and the pod's namespace a
  namespace name (DNS-1123 label): nothing that could add a path segment, ``..`` or a query reaches a URL;
- it is read in the pod's own namespace (owner references cannot cross namespaces) and the object read has the
  reference's uid (:func:`unverified`): only then is it an owner the watchdog writes an Event on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from watchdog.core.model import OwnerRef

__all__ = ["OWNER_KINDS", "OwnerKind", "owner_path", "unresolvable", "unverified", "valid_name", "valid_namespace"]


@dataclass(frozen=True)
class OwnerKind:
    """Where objects of one owner kind live in the API: ``/apis/{group}/{version}/namespaces/NS/{plural}/NAME``."""

    group: str
    version: str
    plural: str


#: (apiVersion, kind) -> where it lives: the only owners the watchdog reads (all namespaced). The chart's
#: ClusterRole grants ``get`` on replicasets, deployments and statefulsets; the others answer 403 unless an
#: operator grants it, and a 403 leaves that owner unverified (no Event on it).
OWNER_KINDS: Mapping[tuple[str, str], OwnerKind] = {
    ("apps/v1", "ReplicaSet"): OwnerKind("apps", "v1", "replicasets"),
    ("apps/v1", "Deployment"): OwnerKind("apps", "v1", "deployments"),
    ("apps/v1", "StatefulSet"): OwnerKind("apps", "v1", "statefulsets"),
    ("apps/v1", "DaemonSet"): OwnerKind("apps", "v1", "daemonsets"),
    ("batch/v1", "Job"): OwnerKind("batch", "v1", "jobs"),
    ("batch/v1", "CronJob"): OwnerKind("batch", "v1", "cronjobs"),
}

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS_LABEL = re.compile(_LABEL)
MAX_NAME = 253
MAX_NAMESPACE = 63


def valid_name(name: str) -> bool:
    """``name`` is a Kubernetes object name: a DNS-1123 subdomain (lower-case alphanumerics, ``-`` and ``.``,
    starting and ending alphanumeric), at most 253 characters."""
    return len(name) <= MAX_NAME and _SUBDOMAIN.fullmatch(name) is not None


def valid_namespace(namespace: str) -> bool:
    """``namespace`` is a namespace name: a DNS-1123 label, at most 63 characters."""
    return len(namespace) <= MAX_NAMESPACE and _DNS_LABEL.fullmatch(namespace) is not None


def unresolvable(ref: OwnerRef, namespace: str) -> str | None:
    """Why ``ref`` (an owner reference of an object in ``namespace``) is not read at all, or None when it may be:
    an unknown kind, a name or namespace that is not one, no uid to verify it against."""
    if (ref.api_version, ref.kind) not in OWNER_KINDS:
        return "not a kind the watchdog resolves"
    if not valid_namespace(namespace):
        return "not a namespace name"
    if not valid_name(ref.name):
        return "not an object name"
    if not ref.uid:
        return "no uid to verify it by"
    return None


def owner_path(api_version: str, kind: str, namespace: str, name: str) -> str | None:
    """The API path of one owner object, built from :data:`OWNER_KINDS` and validated names only; None for an
    unknown kind or an invalid name or namespace (nothing is to be requested then)."""
    where = OWNER_KINDS.get((api_version, kind))
    if where is None or not valid_namespace(namespace) or not valid_name(name):
        return None
    return f"/apis/{where.group}/{where.version}/namespaces/{namespace}/{where.plural}/{name}"


def unverified(obj: Mapping[str, Any] | None, ref: OwnerRef, namespace: str) -> str | None:
    """Why the object read for ``ref`` in ``namespace`` is not that owner, or None when it is: it exists, in that
    namespace, under that name, with the reference's uid (a same-named object is another object)."""
    if obj is None:
        return "not found"
    meta = obj.get("metadata") or {}
    if not ref.uid or meta.get("uid") != ref.uid:
        return f"its uid is {str(meta.get('uid'))[:40]!r}, not the reference's"
    if meta.get("name") != ref.name or meta.get("namespace", namespace) != namespace:
        return "another object was read"
    return None
