"""The fields of pods and namespaces that discovery and the cycle read, and nothing else. Pure: no I/O.

The pod cache (:mod:`watchdog.adapters.podcache`) keeps these trimmed dicts instead of the API's JSON (about
6 KiB per vLLM pod, most of it env, volumes, managedFields and status details nobody here reads). The trimmed
dict has the API's own shape, so :func:`watchdog.core.discovery.discover` reads it unchanged; a field kept is a
field read there (tests/core/test_trim.py traces the reads). Strings that repeat across pods are interned.
The pre-delete checks never read these: they GET the pod afresh.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from watchdog.core.model import (
    EXCLUDE_ANNOTATION,
    GATE_CONDITION,
    NAMESPACE_LABEL,
    PAUSE_ANNOTATION,
    PORT_ANNOTATION,
    WINDOW_ANNOTATION,
    annotation,
)

_META = ("uid", "namespace", "name", "creationTimestamp", "deletionTimestamp")
_ANNOTATIONS = (EXCLUDE_ANNOTATION, PORT_ANNOTATION, WINDOW_ANNOTATION, PAUSE_ANNOTATION)
_OWNER = ("apiVersion", "kind", "name", "uid", "controller")
#: The pod conditions read: readiness, containers ready and the quarantine gate's own (discovery, core/quarantine).
_CONDITIONS = ("Ready", "ContainersReady", GATE_CONDITION)


def _pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: _intern(source[k]) for k in keys if k in source}


def _intern(value: Any) -> Any:
    return sys.intern(value) if isinstance(value, str) else value


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as discovery reads it: identity, the four annotations (exclude, metrics port, window and pause: cut
    to 64 characters), owners, hostNetwork, node, container names and declared ports, phase, IP, the Ready /
    ContainersReady / quarantine-gate conditions, the gate in ``readinessGates`` and restart counts."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    out_meta = _pick(meta, _META)
    if "annotations" in meta:  # tenant text: kept cut as discovery reads it (model.annotation), never interned
        out_meta["annotations"] = {n: v for n in _ANNOTATIONS if (v := annotation(meta, n)) is not None}
    if "ownerReferences" in meta:
        out_meta["ownerReferences"] = [_pick(ref, _OWNER) for ref in meta["ownerReferences"] or []]
    out_spec = _pick(spec, ("hostNetwork", "nodeName"))
    if "containers" in spec:
        out_spec["containers"] = [
            _pick(c, ("name",)) | ({"ports": [_pick(p, ("name", "containerPort")) for p in c["ports"] or []]}
                                   if "ports" in c else {})
            for c in spec["containers"] or []]
    if "readinessGates" in spec:
        out_spec["readinessGates"] = [_pick(g, ("conditionType",)) for g in spec["readinessGates"] or []
                                      if isinstance(g, Mapping) and g.get("conditionType") == GATE_CONDITION]
    out_status = _pick(status, ("phase", "podIP"))
    if "conditions" in status:
        out_status["conditions"] = [_pick(c, ("type", "status")) for c in status["conditions"] or []
                                    if c.get("type") in _CONDITIONS]
    if "containerStatuses" in status:
        out_status["containerStatuses"] = [_pick(c, ("restartCount",)) for c in status["containerStatuses"] or []]
    return {"metadata": out_meta, "spec": out_spec, "status": out_status}


def trim_namespace(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The namespace as discovery reads it: name, the opt-in label, deletion timestamp and phase."""
    meta, status = namespace.get("metadata") or {}, namespace.get("status") or {}
    out_meta = _pick(meta, ("name", "deletionTimestamp"))
    if "labels" in meta:
        out_meta["labels"] = _pick(meta["labels"] or {}, (NAMESPACE_LABEL,))
    return {"metadata": out_meta, "status": _pick(status, ("phase",))}
