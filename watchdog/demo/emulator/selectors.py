"""Label and field selectors as the emulator serves them (an emulator, not a cluster):

- ``labelSelector``: ``a=b``, ``a!=b``, ``a``, ``!a``, ``a in (x)``, ``a notin (x)``.
- ``fieldSelector``: ``path=value``, ``path==value``, ``path!=value`` joined by ``,`` (AND); ``path`` is any
  dotted JSON path (``reason``, ``involvedObject.kind``, ``metadata.name``, ``spec.nodeName``); a missing field
  reads as ``""``. A real apiserver accepts only a few fields per resource and answers 400 for others.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Requirement = tuple[str, str, frozenset[str]]  # (key, "in" | "notin" | "exists" | "!exists", values)
FieldRequirement = tuple[str, bool, str]  # (dotted path, True for = / False for !=, value)
_SET_TERM = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s*\((.*)\)$")
_FIELD_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
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
