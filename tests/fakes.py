"""Typed test doubles shared by the tests.

- :class:`FakeKube`: the Kubernetes calls of ``watchdog.adapters.kube.KubeClient`` with their real signatures
  (so mypy checks every use against ``watchdog.controller.ports.Cluster``: the reads and the actuator's
  writes), forwarding to a real client (over HTTP to the emulator) unless a call is replaced (``overrides``)
  or made to fail (``fail``); every call of a replaced or failing method is counted in ``calls``. No
  ``__getattr__``: a typo or a missing method fails when the test is type-checked or collected, not halfway
  through a run.
- :class:`FakeClock`: a monotonic clock the test moves by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from watchdog.adapters.kube import DeleteResult, EvictResult, KubeClient, PatchResult
from watchdog.controller.ports import Cluster


class FakeKube:
    """A KubeApi over ``inner``; ``overrides[name]`` replaces a call, ``fail[name]`` raises that exception."""

    def __init__(self, inner: KubeClient, **overrides: Callable[..., Any]) -> None:
        self.inner = inner
        self.overrides: dict[str, Callable[..., Any]] = dict(overrides)
        self.fail: dict[str, BaseException] = {}
        self.calls: dict[str, int] = {name: 0 for name in overrides}

    def _call(self, name: str, *args: Any) -> Any:
        if name in self.fail:
            self.calls[name] = self.calls.get(name, 0) + 1
            raise self.fail[name]
        if name in self.overrides:
            self.calls[name] = self.calls.get(name, 0) + 1
            return self.overrides[name](*args)
        return getattr(self.inner, name)(*args)

    @property
    def api_requests(self) -> int:
        return self.inner.api_requests

    def server_time(self) -> float | None:
        result: float | None = self._call("server_time")
        return result

    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("list_namespaces", label_selector)
        return result

    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("list_pods", label_selector, namespaces)
        return result

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("get_pod", namespace, name)
        return result

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("get_namespace", name)
        return result

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> DeleteResult:
        result: DeleteResult = self._call("delete_pod", namespace, name, uid, grace_period_s)
        return result

    def evict_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> EvictResult:
        result: EvictResult = self._call("evict_pod", namespace, name, uid, grace_period_s)
        return result

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("get_object", api_version, kind, namespace, name)
        return result

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self._call("create_event", namespace, body)

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("get_config_map", namespace, name)
        return result

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("create_config_map", namespace, body)
        return result

    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("replace_config_map", namespace, name, body)
        return result

    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, Any]) -> PatchResult:
        result: PatchResult = self._call("patch_pod_condition", namespace, name, uid, condition)
        return result

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("get_lease", namespace, name)
        return result

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("create_lease", namespace, body)
        return result

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("replace_lease", namespace, name, body)
        return result

    def get_node(self, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("get_node", name)
        return result

    def patch_node_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("patch_node_taints", name, taints, resource_version)
        return result

    def read_pod_log(self, namespace: str, name: str, container: str, lines: int, limit_bytes: int) -> bytes:
        result: bytes = self._call("read_pod_log", namespace, name, container, lines, limit_bytes)
        return result


class FakeClock:
    """Monotonic seconds that move only when the test says so (``advance``) or sets ``now``."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def as_kube_api(fake: FakeKube) -> Cluster:
    """Type-checked proof (``make lint`` runs mypy --strict on this file) that FakeKube satisfies the port."""
    return fake
