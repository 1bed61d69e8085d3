"""The taint grammar of the ``nodeTaint`` setting (kubectl's ``key[=value]:Effect``). Pure: the config loader
validates with it and node escalation applies what it returns."""

from __future__ import annotations

import re

DEFAULT_TAINT = "vllm-watchdog.io/stalled=true:NoSchedule"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# A qualified name (optional DNS prefix "/"), and a label value (may be empty).
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def parse_taint(text: str) -> dict[str, str]:
    """``key[=value]:Effect`` -> ``{"key", "value"?, "effect"}`` (kubectl's taint syntax).

    Effect is NoSchedule, PreferNoSchedule or NoExecute; key a qualified name (``prefix/name``), value a label
    value (optional). Raises ValueError with a one-line message naming the problem.
    """
    head, sep, effect = text.strip().rpartition(":")
    if not sep or not head:
        raise ValueError(f"invalid taint {text!r}: expected key[=value]:Effect, e.g. {DEFAULT_TAINT!r}")
    if effect not in EFFECTS:
        raise ValueError(f"invalid taint {text!r}: effect {effect!r} is not one of {', '.join(EFFECTS)}")
    key, has_value, value = head.partition("=")
    if not _KEY.match(key):
        raise ValueError(f"invalid taint {text!r}: key {key!r} is not a qualified name ([prefix/]name)")
    if not _VALUE.match(value):
        raise ValueError(f"invalid taint {text!r}: value {value!r} is not a valid label value")
    return {"key": key, "value": value, "effect": effect} if has_value else {"key": key, "effect": effect}
