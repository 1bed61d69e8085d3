"""A small sync client to seed and inspect an emulator over HTTP (in this process or another)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, cast

SEED_HEADER = "X-Emulator-Seed"  # requests carrying this header are not recorded in request_log


class EmulatorError(Exception):
    """A seeding request to the emulator failed (one-line message: method, path, status, reason)."""


class EmulatorClient:
    """Sync helpers to seed/inspect an emulator at ``base_url`` (in this process or another) over HTTP.

    Requests carry :data:`SEED_HEADER`, so they are not counted in ``request_log``. Non-2xx: EmulatorError.
    """

    def __init__(self, base_url: str = "") -> None:
        self.base_url = base_url.rstrip("/")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Send one unrecorded request; return (HTTP status, decoded JSON body or None)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method.upper(),
                                     headers={"Content-Type": "application/json", SEED_HEADER: "1"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        return status, (json.loads(raw) if raw else None)

    def _ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.request(method, path, body)
        if not 200 <= status < 300:
            reason = answer.get("message", "") if isinstance(answer, dict) else ""
            raise EmulatorError(f"{method} {path}: HTTP {status}: {str(reason)[:200]}")
        return answer

    def create_object(self, api_path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to a collection path (``/apis/apps/v1/namespaces/NS/replicasets``); return it stored."""
        return cast(dict[str, Any], self._ok("POST", api_path, body))

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self.create_object("/api/v1/namespaces", {"metadata": {"name": name, "labels": dict(labels or {})}})

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Create a pod in ``pod["metadata"]["namespace"]`` (default "default"); return it with its uid."""
        namespace = pod.get("metadata", {}).get("namespace") or "default"
        return self.create_object(f"/api/v1/namespaces/{namespace}/pods", pod)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, answer = self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return answer if status == 200 else None

    def list_objects(self, api_path: str) -> list[dict[str, Any]]:
        """Items of a list path, e.g. ``/api/v1/pods`` or ``/apis/events.k8s.io/v1/namespaces/NS/events``."""
        return cast(list[dict[str, Any]], self._ok("GET", api_path)["items"])

    def list_events(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """core/v1 Events, of one namespace or all."""
        return self.list_objects(f"/api/v1/namespaces/{namespace}/events" if namespace else "/api/v1/events")

    def patch_object(self, api_path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch one object (``/api/v1/namespaces/NS/pods/NAME``); return the new state."""
        return cast(dict[str, Any], self._ok("PATCH", api_path, patch))
