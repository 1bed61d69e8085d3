"""The ports the controller is wired through (``typing.Protocol``): what it needs from the Kubernetes API,
from the scraper, from Prometheus, from a source of engine signals, from node escalation and from a clock. The
adapters (and the sources) satisfy them; tests pass typed fakes (tests/fakes.py) that mypy checks against the
same Protocols."""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from watchdog.adapters.promdecode import PrometheusError
from watchdog.controller.actuator import Writes
from watchdog.controller.reading import Reading
from watchdog.controller.state import PodRecord
from watchdog.core.model import WatchedPod
from watchdog.core.promql import Series

T = TypeVar("T")

#: Seconds on a monotonic clock (or Unix seconds for the wall clock).
Clock = Callable[[], float]


class KubeApi(Protocol):
    """The Kubernetes reads the watchdog makes (adapters.kube.KubeClient); its writes go through the actuator
    alone (controller.actuator.Writes)."""

    @property
    def api_requests(self) -> int: ...
    def server_time(self) -> float | None: ...
    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]: ...
    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]: ...
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_namespace(self, name: str) -> dict[str, Any] | None: ...
    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_node(self, name: str) -> dict[str, Any] | None: ...


class Cluster(KubeApi, Writes, Protocol):
    """The whole client the composition root hands out: its reads to the collaborators, its writes to the
    actuator only."""


class Listing(Protocol):
    """Where the cycle lists namespaces and pods when not from the API itself: the watch-based cache
    (adapters.podcache.PodCache), stopped with the watchdog; ``keep_pods_of``: namespace-only mode, the namespaces
    still watched (the pod informers of any other are stopped)."""

    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]: ...
    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]: ...
    def keep_pods_of(self, namespaces: Collection[str]) -> None: ...
    def close(self) -> None: ...


class AsyncFetcher(Protocol):
    """The bounded scrape with its own event loop (adapters.ascrape.AsyncScraper): the cycle runs every scrape of
    the fleet as a coroutine there (``run``: its concurrent future); ``fetch`` is the synchronous call (the
    confirmation scrape). The body, or ScrapeError."""

    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes: ...
    def fetch(self, url: str) -> bytes: ...
    def run(self, coro: Coroutine[Any, Any, T]) -> Future[T]: ...
    def close(self) -> None: ...


class Source(Protocol):
    """Where a target's engine signals come from (``source`` per target): ``start`` begins reading every due pod of
    a cycle and returns the call that waits for their readings by pod UID (a source may read there, in the
    cycle's thread, while another reads on its own loop); ``confirm`` reads one pod afresh, right before an
    action; ``probe`` reads something when no pod was due, so that a source that cannot be read at all shows
    before any pod is watched: (outcome, detail) of that read, or None when there is nothing to read without a pod.
    None raises for a pod's trouble: that is its reading's outcome."""

    where: str  # what it reads, for people: "prometheus (URL)", "scrape (the pods' /metrics)"

    def start(self, pods: Sequence[tuple[WatchedPod, PodRecord]]) -> Callable[[], Mapping[str, Reading]]: ...
    def confirm(self, pod: WatchedPod) -> Reading: ...
    def probe(self) -> tuple[str, str] | None: ...
    def close(self) -> None: ...


class Querier(Protocol):
    """Instant queries to Prometheus (adapters.prometheus.PrometheusClient): per (query, label names) the decoded
    rows, each with the values of those labels, or that query's PrometheusError."""

    def query_each(self, queries: Iterable[tuple[str, tuple[str, ...]] | None], at: float,
                   deadline: float | None = None, query_s: float | None = None,
                   ) -> Iterator[tuple[int, list[Series] | PrometheusError]]: ...


class Escalation(Protocol):
    """What node escalation needs from the remediator (controller.nodes.NodeEscalator)."""

    def on_deletion(self, node_name: str | None, pod_uid: str, pod_ref: str, tenant: str) -> str: ...
