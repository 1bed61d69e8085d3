"""The ports the controller is wired through (``typing.Protocol``): what it needs from the Kubernetes API,
from the scraper, from node escalation and from a clock. The adapters satisfy them; tests pass typed fakes
(tests/fakes.py) that mypy checks against the same Protocols."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from watchdog.adapters.kube import DeleteResult, EvictResult

#: Seconds on a monotonic clock (or Unix seconds for the wall clock).
Clock = Callable[[], float]


class KubeApi(Protocol):
    """The Kubernetes calls the cycle, the remediator and the budget restore make (adapters.kube.KubeClient)."""

    @property
    def api_requests(self) -> int: ...
    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]: ...
    def list_pods(self, label_selector: str) -> list[dict[str, Any]]: ...
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> DeleteResult: ...
    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> EvictResult: ...
    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...
    def list_events(self, field_selector: str) -> list[dict[str, Any]]: ...


class Fetcher(Protocol):
    """One bounded scrape (adapters.scrape.Scraper): the body, or ScrapeError."""

    def fetch(self, url: str) -> bytes: ...
    def close(self) -> None: ...


class Escalation(Protocol):
    """What node escalation needs from the remediator (adapters.nodes.NodeEscalator)."""

    def on_deletion(self, node_name: str | None, pod_uid: str, pod_ref: str) -> str: ...
