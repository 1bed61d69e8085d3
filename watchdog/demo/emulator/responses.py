"""Answers the emulator gives as a real API server would: ``Status`` failures and the eviction verdict."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import aiohttp.web

#: Answer of an allowed eviction (policy/v1 returns 201 with a Success Status).
EVICTED = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201}


def status_response(code: int, reason: str, message: str, details: dict[str, Any] | None = None
                    ) -> aiohttp.web.Response:
    """A ``Status`` failure body as the apiserver sends it."""
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}
    return aiohttp.web.json_response(body, status=code)


def not_found(details: dict[str, Any]) -> aiohttp.web.Response:
    """404 for the object ``details`` names (``kind``: the plural, ``name``)."""
    return status_response(404, "NotFound", f'{details["kind"]} "{details["name"]}" not found', details)


def eviction_is_blocked(blocked: bool | Collection[str], namespace: str | None, name: str | None) -> bool:
    """``blocked`` is True (every eviction), False, or a collection of ``"namespace/name"`` pod references."""
    return blocked if isinstance(blocked, bool) else f"{namespace}/{name}" in blocked
